"""The web console (`kbroker console`): a read-only page over a running cluster, served by a
process of its own. `snapshot` reads the cluster through the admin client, `metrics_history`
turns scrapes of the brokers' metrics endpoints into chart series, `server` polls both and
serves the page (`static/`, with uPlot vendored in `static/vendor/`) and its JSON."""

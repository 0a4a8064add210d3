"""Broker metrics, scraped over HTTP in Prometheus' text format (docs/operations.md, "Metrics").

Two halves, so the request path pays almost nothing: `stats` holds plain Python counters and
fixed-bucket histograms that the event loop bumps once per request (never per record), and
`collector` turns them, with gauges read from the broker's state, into metric families only
when a scraper asks. `endpoint` serves them from prometheus_client's HTTP server thread with a
registry of the broker's own; `loop_monitor` measures how busy the event loop is.
"""

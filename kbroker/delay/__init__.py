"""Delayed delivery's pure core (docs/delayed-and-retry.md): no sockets, no files but snapshots.

- `delay_headers`: a record's due time from its headers and the topic's settings;
- `pending_batches`: the pending (control) batches that hold delayed records in the partition's
  own log, and the delivery batches that append them at their due time;
- `timing_wheel`: a hierarchical timing wheel of (due, offset) entries;
- `delay_index`: a partition's pending records, fed from its log batches, with snapshots.
"""

"""The wire contract between ingest and its consumers (the merger, verify, tests): record
header names, the per-record binlog position and the replay rule, topic names. Ingest
writes by it and the merger reads by it; neither owns it."""

"""The user's side of a running traced process: attach to one started
without the tracer (attach), find its segment and post requests in it
(client).  Built on daemon/ (segment, requests), never the other way."""

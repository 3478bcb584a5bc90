"""HTTP routers: parse, call a service, shape the response."""

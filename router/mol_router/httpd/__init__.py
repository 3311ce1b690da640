"""The HTTP/1.1 server the router runs on: the protocol and the messages it writes."""

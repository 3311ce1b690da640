"""The request path: the proxy (read, choose, forward, stream back), the attempt loop to
the engines, and what one request carries.
"""

"""The trained router head: the model (pure), its fitting (pure), and its sources (a file
or the catalog).
"""

"""The auditor (`tidal audit`): the §F guarantees, checked over a cluster's
streams. `registry.audit` is the pure entry; `streams.py` reads a bus."""

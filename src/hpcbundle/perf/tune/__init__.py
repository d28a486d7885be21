"""`hpcbundle tune`: `sweep` (the knobs, the coordinate sweep, the tuned copy; pure) and `run` (each
candidate's command through the site's launch line, run bounded, its busbw read back)."""

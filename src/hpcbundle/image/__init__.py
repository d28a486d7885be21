"""Stage 3a, build: what goes into an image, rendered as a Dockerfile or .def, and built with a Docker engine."""

"""Stage 1, config: load and validate the inputs (recipes, sites, the bundle holding them), one error type."""

"""Stage 4, diagnose: observe the nodes (probes, fan-out), judge them with the rules (doctor), draft a site (detect)."""

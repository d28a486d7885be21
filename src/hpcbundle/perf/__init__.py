"""Stage 5, perf: tune a site's allreduce, plan and report scaling studies, fit and plot the model."""

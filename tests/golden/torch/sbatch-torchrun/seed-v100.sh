exit 2
hpcbundle: error: ROOT/site_configs/seed-v100.yaml: network.interfaces: missing on site seed-v100: a torch job over several nodes has no way to pick the head's data address (name the data interface, e.g. network.interfaces: [ib0])

exit 2
hpcbundle: error: ROOT/site_configs/stampede2-knl.yaml: network.interfaces: missing on site stampede2-knl: a torch job over several nodes has no way to pick the head's data address (name the data interface, e.g. network.interfaces: [ib0])

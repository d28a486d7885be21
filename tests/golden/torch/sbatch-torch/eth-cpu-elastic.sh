exit 2
hpcbundle: error: --torch: horovodrun (launcher.name of site eth-cpu-elastic) cannot start torch.distributed ranks (use a site whose launcher is mpiexec.hydra, mpirun, mpirun5 or srun)

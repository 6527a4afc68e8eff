#!/usr/bin/env bash
# mpirun with the Open MPI settings a single small machine needs (docs/DESIGN.md, toolchain facts):
#   bash tools/mpirun.sh -np 4 python3 -m jtmini.test.test_resnet
#   JTMINI_MPI_DEBUG=1 bash tools/mpirun.sh -np 2 python3 my_script.py
# - as root, Open MPI refuses to start without OMPI_ALLOW_RUN_AS_ROOT(_CONFIRM);
# - more ranks than cores needs oversubscription;
# - shared memory and loopback only, so no network interface is probed (one machine only:
#   for a hostfile across machines, call mpirun directly).
# A variable the caller already set is left as it is.
set -euo pipefail
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}"
  export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
fi
export OMPI_MCA_rmaps_base_oversubscribe="${OMPI_MCA_rmaps_base_oversubscribe:-1}"
export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"
export OMPI_MCA_oob_tcp_if_include="${OMPI_MCA_oob_tcp_if_include:-lo}"
exec mpirun "$@"

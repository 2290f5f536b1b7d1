#!/usr/bin/env bash
# Sourced by a device-call script (docs/perf/<date>/*.sh) on the GPU machine, with NAME set to the bundle's name:
# unpacks build-dev-lead/$NAME.tar.xz (tools/pack_kernel_bins.sh's layout: bin/, lib/, configs/, COMMIT) once into
# /tmp/s/$NAME, sets P (the bundle) and O (a results folder, created), and puts the bundle's libraries, torch's cuDNN
# and CUDA's on LD_LIBRARY_PATH. Prints the bundle's COMMIT line.
#   NAME=s27a; source tools/device_bundle_env.sh
: "${NAME:?set NAME to the bundle name}"
mkdir -p /tmp/s && [ -d "/tmp/s/${NAME}" ] || tar -xJf "build-dev-lead/${NAME}.tar.xz" -C /tmp/s
P=/tmp/s/${NAME}
O=${O:-/tmp/out.${NAME}}
mkdir -p "${O}"
CUDNN_LIB="$(python3 -c "import glob, os, site, torch
roots = site.getsitepackages() + [os.path.dirname(os.path.dirname(torch.__file__))]
hits = [f for r in roots for f in glob.glob(os.path.join(r, 'nvidia', '**', 'libcudnn.so.9'), recursive=True)]
print(os.path.dirname(hits[0]) if hits else '')" 2>/dev/null)"
export LD_LIBRARY_PATH=${P}/lib:${CUDNN_LIB}:/usr/local/cuda/lib64
echo "commit $(cat "${P}/COMMIT")"

# Sourced from the unpacked archive of scripts/pack-deps.sh (as its env.sh):
#   . /opt/wantrain-deps/env.sh
# Points CMake, pkg-config, the loader and Open MPI at the unpacked Debian
# packages, wherever the archive was unpacked. Nothing is installed.
deps=$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)
arch=x86_64-linux-gnu
export WANTRAIN_DEPS="$deps"
export PATH="$deps/usr/bin:$PATH"
export CMAKE_PREFIX_PATH="$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
# The linker's search path too: HDF5's and Open MPI's wrappers say -lsz, -lcurl.
export LIBRARY_PATH="$deps/usr/lib/$arch${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$deps/usr/lib/$arch:$deps/usr/lib/$arch/openmpi/lib:$deps/usr/lib/$arch/hdf5/openmpi${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The .pc files say prefix=/usr: the sysroot puts the tree in front.
export PKG_CONFIG_PATH="$deps/usr/lib/$arch/pkgconfig:$deps/usr/share/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$deps"
# Open MPI finds its wrappers' data, components and orted under this prefix.
export OPAL_PREFIX="$deps/usr"
export MPI_HOME="$deps/usr"
# PMIx (Open MPI's process management) looks for its plugins and help
# files under the prefix it was built for.
export PMIX_INSTALL_PREFIX="$deps/usr/lib/$arch/pmix2"
export PMIX_MCA_mca_base_component_path="$deps/usr/lib/$arch/pmix2/lib/pmix"
# Components whose libraries are not packed (PSM, OFI: fabrics a
# single GPU machine has no use for) are skipped; say nothing of them.
export OMPI_MCA_mca_base_component_show_load_errors=0
# Without ssh or rsh (the archive has neither) Open MPI launches on this
# node alone, as its `isolated` launcher does; otherwise it would refuse to
# start even a single process.
command -v ssh >/dev/null || command -v rsh >/dev/null || export OMPI_MCA_plm=isolated
export HDF5_ROOT="$deps/usr"
# CMake's FindHDF5 asks the packed h5pcc (first on PATH) for the flags.
export HDF5_C_COMPILER_EXECUTABLE="$deps/usr/bin/h5pcc"
unset deps arch

# `cmake --install build --prefix P` lays out a tree that a cluster can
# `module load`:
#   P/bin/                  wantrain wandata wansample wanbench (apps/), wanrun (mpi/)
#   P/lib/                  libwantrain_*.a, cmake/wantrain/ (find_package(wantrain) -> wantrain::core)
#   P/include/wantrain/     the public headers, as the sources include them ("wantrain/wan/model/model_config.hpp")
#   P/share/wantrain/       configs/, run.ini, distill.ini, plot_metrics.py, slurm/ (sbatch scripts), mpi/ (MCA file, examples)
#   P/share/doc/wantrain/   README.md and docs/
#   P/modulefiles/wantrain/ VERSION.lua (Lmod) and VERSION (Tcl, Environment Modules)
# The modulefiles and the package config are written at install time, so
# they name the prefix actually installed to.
set(WANTRAIN_MODULE_MPI "" CACHE STRING
    "A module the wantrain modulefile loads first (e.g. openmpi/4.1); empty: the system MPI")

install(PROGRAMS mpi/wanrun DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS scripts/plot_metrics.py DESTINATION ${CMAKE_INSTALL_DATADIR}/wantrain)  # wantrain plot
install(TARGETS wantrain_util wantrain_io wantrain_media wantrain_report wantrain_distributed wantrain_nn wantrain_data
                wantrain_ckpt wantrain_train wantrain_wan_model wantrain_wan_vae wantrain_wan_encoders wantrain_wan_plan
                wantrain_wan_sample wantrain_wan_objective wantrain_wan_run wantrain_wan_encode wantrain_app
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY lib/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wantrain FILES_MATCHING PATTERN "*.hpp")
install(FILES "${PROJECT_BINARY_DIR}/generated/wantrain/config.hpp"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/wantrain)
install(DIRECTORY data/configs DESTINATION ${CMAKE_INSTALL_DATADIR}/wantrain)
install(FILES data/run.ini data/distill.ini DESTINATION ${CMAKE_INSTALL_DATADIR}/wantrain)
install(PROGRAMS slurm/train.sbatch slurm/sweep.sbatch slurm/srun-wantrain
        DESTINATION ${CMAKE_INSTALL_DATADIR}/wantrain/slurm)
install(FILES slurm/sweep.example slurm/README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/wantrain/slurm)
install(FILES mpi/mca-params.conf mpi/hostfile.example mpi/rankfile.example mpi/README.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/wantrain/mpi)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})

# What the generated files need to know, fixed now; the prefix comes at install time.
# The NCCL backend links neither NCCL nor the CUDA runtime: it finds them
# among the libraries LibTorch's CUDA backend loads (lib/distributed/cuda_api.hpp).
set(_nccl_link "")
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _mpiexec_version ERROR_QUIET)
string(REGEX MATCH "[0-9]+\\.[0-9]+(\\.[0-9]+)?" _mpi_release "${_mpiexec_version}")
if(_mpiexec_version MATCHES "Open MPI|OpenRTE")
  set(_mpi_name "Open MPI ${_mpi_release}")
else()
  set(_mpi_name "MPI ${_mpi_release}")
endif()
# One string, not a list (the library lists hold semicolons).
set(_hdf5_link "${HDF5_C_LIBRARIES}")
# libprotobuf by its path: in a consumer that finds LibTorch first, the
# protobuf::libprotobuf target added nothing to the link line.
if(Protobuf_LIBRARY_RELEASE)
  set(_protobuf_link "${Protobuf_LIBRARY_RELEASE}")
else()
  set(_protobuf_link "${Protobuf_LIBRARY}")
endif()
# From lib/cmake/wantrain back to the prefix, however deep the libdir is (lib64, lib/x86_64-linux-gnu).
file(RELATIVE_PATH _config_to_prefix "/prefix/${CMAKE_INSTALL_LIBDIR}/cmake/wantrain" "/prefix")
set(_install_vars "set(WANTRAIN_CONFIG_TO_PREFIX \"${_config_to_prefix}\")
set(WANTRAIN_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
set(Torch_DIR \"${Torch_DIR}\")
set(WANTRAIN_VERSION \"${PROJECT_VERSION}\")
set(WANTRAIN_MPI \"${_mpi_name}, ${MPIEXEC_EXECUTABLE}\")
set(WANTRAIN_MODULE_MPI \"${WANTRAIN_MODULE_MPI}\")
set(WANTRAIN_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
set(WANTRAIN_NCCL_ENABLED \"${WANTRAIN_NCCL_ENABLED}\")
set(WANTRAIN_NCCL_LINK \"${_nccl_link}\")
set(WANTRAIN_HDF5_LINK \"${_hdf5_link}\")
set(WANTRAIN_CSV_LINK \"${WANTRAIN_CSV_LIBRARY}\")
set(WANTRAIN_PROTOBUF_LINK \"${_protobuf_link}\")
set(WANTRAIN_FFMPEG_LINK \"${WANTRAIN_FFMPEG_LINK_LIBRARIES}\")")
install(CODE "
${_install_vars}
set(WANTRAIN_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
set(_in \"${PROJECT_SOURCE_DIR}/cmake/install\")
set(_modules \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/modulefiles/wantrain\")
configure_file(\"\${_in}/wantrain.lua.in\" \"\${_modules}/\${WANTRAIN_VERSION}.lua\" @ONLY)
configure_file(\"\${_in}/wantrain.tcl.in\" \"\${_modules}/\${WANTRAIN_VERSION}\" @ONLY)
set(_cmake \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/cmake/wantrain\")
configure_file(\"\${_in}/wantrainConfig.cmake.in\" \"\${_cmake}/wantrainConfig.cmake\" @ONLY)
include(CMakePackageConfigHelpers)
write_basic_package_version_file(\"\${_cmake}/wantrainConfigVersion.cmake\"
  VERSION \${WANTRAIN_VERSION} COMPATIBILITY SameMinorVersion)
message(STATUS \"Installing: \${_modules}/\${WANTRAIN_VERSION}.lua and its Tcl twin; \${_cmake}/wantrainConfig.cmake\")
")

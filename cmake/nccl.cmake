# NCCL for every GPU collective: the NCCL weight transport (weightsync/),
# the learner's data-parallel group (learner/internal/nccl_group.cc) and the
# tensor-parallel all-reduce (model/internal/nccl_all_reduce.cc), one
# libnccl.so.2 for all. TRELLIS_NCCL says whether it was found;
# trellis::nccl links it with CUDA's runtime. Where it is not, the
# transport is not built and the other two compile their *_absent.cc,
# whose calls fail with a status naming what is missing.
option(TRELLIS_WITH_NCCL "Build the NCCL paths if CUDA and NCCL are found" ON)
set(TRELLIS_NCCL OFF)
if(TRELLIS_WITH_NCCL AND TRELLIS_CUDA)
  # PyPI's LibTorch needs the NCCL of its nvidia-nccl wheel (newer than the
  # toolkit's, one libnccl.so.2 per process): that one first.
  set(torch_wheel_nccl "${TORCH_INSTALL_PREFIX}/../nvidia/nccl")
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${torch_wheel_nccl} ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
    HINTS ${torch_wheel_nccl} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
          ${CUDAToolkit_TARGET_DIR} ENV NCCL_HOME
    PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(TRELLIS_NCCL ON)
    add_library(trellis_nccl INTERFACE)
    add_library(trellis::nccl ALIAS trellis_nccl)
    target_include_directories(trellis_nccl INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(trellis_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
  endif()
endif()
message(STATUS "trellis: NCCL collectives (learner group, tensor parallel) ${TRELLIS_NCCL}")

# The apps' malloc. LibTorch's CPU tensors come from malloc; glibc's keeps
# the memory of freed activations resident between steps (peak RSS 1.6-2x
# the tensors alive, docs/performance.md) and gperftools' TCMalloc does not,
# and is faster on the same steps. WANTRAIN_MALLOC: AUTO links TCMalloc
# (libtcmalloc_minimal) into the apps when found, tcmalloc requires it,
# system keeps glibc's. Sanitizer builds keep their own allocator.
# Defines wantrain_malloc, an interface target the apps link.
set(WANTRAIN_MALLOC AUTO CACHE STRING "malloc of the apps: AUTO (TCMalloc when found), tcmalloc or system")
set_property(CACHE WANTRAIN_MALLOC PROPERTY STRINGS AUTO tcmalloc system)

if(NOT WANTRAIN_MALLOC MATCHES "^(AUTO|tcmalloc|system)$")
  message(FATAL_ERROR "WANTRAIN_MALLOC=${WANTRAIN_MALLOC}: expected AUTO, tcmalloc or system")
endif()
add_library(wantrain_malloc INTERFACE)
set(WANTRAIN_MALLOC_USED "system")
if(NOT WANTRAIN_MALLOC STREQUAL "system")
  find_library(TCMALLOC_MINIMAL_LIBRARY NAMES tcmalloc_minimal)
  if(WANTRAIN_SANITIZE)
    if(WANTRAIN_MALLOC STREQUAL "tcmalloc")
      message(FATAL_ERROR "WANTRAIN_MALLOC=tcmalloc cannot be combined with WANTRAIN_SANITIZE (the sanitizer brings its own malloc)")
    endif()
  elseif(TCMALLOC_MINIMAL_LIBRARY)
    # Nothing in the apps calls TCMalloc by name: keep it even where the
    # linker drops libraries that are not referenced (--as-needed).
    target_link_libraries(wantrain_malloc INTERFACE
      "-Wl,--push-state,--no-as-needed" "${TCMALLOC_MINIMAL_LIBRARY}" "-Wl,--pop-state")
    set(WANTRAIN_MALLOC_USED "tcmalloc")
  elseif(WANTRAIN_MALLOC STREQUAL "tcmalloc")
    message(FATAL_ERROR "WANTRAIN_MALLOC=tcmalloc, but libtcmalloc_minimal was not found (Debian: libgoogle-perftools-dev)")
  endif()
endif()

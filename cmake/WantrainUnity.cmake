# Unity builds: a target's sources compiled in batches, so that the
# precompiled <torch/torch.h> (570 MB) is loaded once per batch, not once per
# file, and what the batches share is compiled once.
#
# Not CMake's own UNITY_BUILD (3.25): its batch files include each source by
# its absolute path, so __FILE__ (gtest's and the CHECK macros' locations)
# names the clone, every object differs from one clone to the next, and
# ccache misses on CI's fresh clone. These batches include each source by a
# path relative to the batch file, which is the same in every clone.
#
# Sources with a compile property of their own (options, definitions,
# SKIP_PRECOMPILE_HEADERS, SKIP_UNITY_BUILD_INCLUSION) or generated ones are
# compiled alone, as CMake's unity builds do. WANTRAIN_UNITY_BUILD=OFF (the
# dev preset) compiles every file alone.

# Batches `target`'s sources at the end of the directory that made it, after
# every set_source_files_properties of that directory.
function(wantrain_unity_build target)
  if(WANTRAIN_UNITY_BUILD)
    # A deferred call's arguments are read when it runs: put the name in now.
    cmake_language(EVAL CODE "cmake_language(DEFER CALL _wantrain_unity_batches [[${target}]])")
  endif()
endfunction()

function(_wantrain_unity_batches target)
  get_target_property(_sources ${target} SOURCES)
  get_target_property(_source_dir ${target} SOURCE_DIR)
  set(_out_dir "${CMAKE_CURRENT_BINARY_DIR}/unity")
  set(_alone "")
  set(_batch_files "")
  set(_content "")
  set(_count 0)
  set(_index 0)
  foreach(_source IN LISTS _sources)
    get_filename_component(_path "${_source}" ABSOLUTE BASE_DIR "${_source_dir}")
    set(_own_properties FALSE)
    foreach(_property COMPILE_OPTIONS COMPILE_DEFINITIONS COMPILE_FLAGS INCLUDE_DIRECTORIES
                      SKIP_PRECOMPILE_HEADERS SKIP_UNITY_BUILD_INCLUSION GENERATED)
      get_source_file_property(_value "${_source}" ${_property})
      if(_value)
        set(_own_properties TRUE)
      endif()
    endforeach()
    if(_own_properties OR NOT _path MATCHES "\\.(cpp|cc|cxx)$")
      list(APPEND _alone "${_source}")
      continue()
    endif()
    file(RELATIVE_PATH _relative "${_out_dir}" "${_path}")
    string(APPEND _content "#include \"${_relative}\"\n")
    math(EXPR _count "${_count} + 1")
    if(_count EQUAL WANTRAIN_UNITY_BATCH)
      _wantrain_unity_write(${target} ${_index} "${_content}" _batch_files)
      math(EXPR _index "${_index} + 1")
      set(_content "")
      set(_count 0)
    endif()
  endforeach()
  if(_count GREATER 0)
    _wantrain_unity_write(${target} ${_index} "${_content}" _batch_files)
  endif()
  set_property(TARGET ${target} PROPERTY SOURCES ${_alone} ${_batch_files})
endfunction()

# Writes batch `index` of `target` (only when its content changed, so that a
# reconfigure rebuilds nothing) and appends its path to `files_var`.
function(_wantrain_unity_write target index content files_var)
  set(_file "${CMAKE_CURRENT_BINARY_DIR}/unity/${target}_${index}.cpp")
  file(CONFIGURE OUTPUT "${_file}" CONTENT "// A unity batch of ${target} (cmake/WantrainUnity.cmake).\n${content}" @ONLY)
  set(${files_var} ${${files_var}} "${_file}" PARENT_SCOPE)
endfunction()

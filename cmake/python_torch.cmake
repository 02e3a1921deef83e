# When the Python package is built, LibTorch must be the one FRUGAL_PYTHON's
# torch uses (one ABI in one process). A pip wheel ships its own LibTorch and
# CMake config: put it first on the search path unless the user chose a
# Torch_DIR. Debian's python3-torch has no CMake config there (its LibTorch is
# libtorch-dev's, found as usual). python/CMakeLists.txt checks the result.
if(FRUGAL_BUILD_PYTHON AND NOT Torch_DIR AND EXISTS "${FRUGAL_PYTHON}")
  execute_process(
    COMMAND "${FRUGAL_PYTHON}" -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _frugal_py_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
  if(_rc EQUAL 0 AND IS_DIRECTORY "${_frugal_py_torch_prefix}/Torch")
    message(STATUS "frugal: LibTorch of ${FRUGAL_PYTHON}'s torch: ${_frugal_py_torch_prefix}")
    list(PREPEND CMAKE_PREFIX_PATH "${_frugal_py_torch_prefix}")
  endif()
endif()

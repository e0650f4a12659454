# Debian packages by CPack, one per install component (scripts/package.sh runs `cpack -G DEB`):
#   runtime -> libaccel1      the library; the package name carries the soname's ABI number
#   dev     -> libaccel-dev   headers, accel.pc, the CMake package, the libaccel.so link
#   tools   -> accel-tools    the `accel` command
#   python  -> python3-accel  the SWIG module (when the Python bindings are built)
# Every version comes from project(VERSION) in CMakeLists.txt. Depends on other packages come from
# dpkg-shlibdeps (LibTorch, cJSON, yaml-cpp, protobuf, Open MPI, ...), never written here.

set(CPACK_PACKAGE_NAME accel)
set(CPACK_PACKAGE_VENDOR "accel")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Accelerate-style distributed training for any language, via a C ABI")
set(CPACK_PACKAGE_HOMEPAGE_URL "https://github.com/huggingface/accelerate")
if(NOT CPACK_PACKAGE_CONTACT)
  set(CPACK_PACKAGE_CONTACT "accel maintainers <accel-maintainers@example.org>")
endif()
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev tools)
if(ACCEL_BUILD_BINDINGS AND ACCEL_BUILD_PYTHON)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# libaccel.so.1 is in no installed package while the packages are built: dpkg-shlibdeps finds it here and
# the dependency on libaccel1 comes from the component dependencies below.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libaccel${ACCEL_ABI_VERSION})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
# A shlibs file, so that packages linking libaccel.so.1 get their Depends from dpkg-shlibdeps too.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# ldconfig by dpkg's trigger, as debhelper does, instead of CPack's postinst/postrm calling it.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${CMAKE_SOURCE_DIR}/cmake/debian/triggers
  ${CMAKE_SOURCE_DIR}/cmake/debian/postinst ${CMAKE_SOURCE_DIR}/cmake/debian/postrm)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "Accelerate-style distributed training for any language (library)
libaccel is Hugging Face Accelerate's training loop in C++ on LibTorch behind a
C ABI: gradient accumulation, mixed precision, DDP, FSDP and DeepSpeed ZeRO
sharding, checkpoints and trackers. This package holds the shared library.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libaccel-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEV_DEPENDS runtime)
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "Accelerate-style distributed training for any language (development files)
The C headers (and the C++ header accel.hpp), the pkg-config file accel.pc and
the CMake package (find_package(accel)) for building programs against
libaccel.")

set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME accel-tools)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION science)
set(CPACK_COMPONENT_TOOLS_DEPENDS runtime)
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
  "Accelerate-style distributed training for any language (accel command)
The accel command: launch, config, env, test, estimate-memory and
merge-weights, as Accelerate's accelerate command has them.")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-accel)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_COMPONENT_PYTHON_DEPENDS runtime)
# An extension module links no libpython, so dpkg-shlibdeps cannot see the interpreter it needs.
find_package(Python3 COMPONENTS Interpreter QUIET)
math(EXPR _accel_py_next "${Python3_VERSION_MINOR} + 1")
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
  "python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}), python3 (<< ${Python3_VERSION_MAJOR}.${_accel_py_next})")
set(CPACK_COMPONENT_PYTHON_DESCRIPTION
  "Accelerate-style distributed training for any language (Python 3 module)
The accel module for Python 3: libaccel's C API through SWIG, with the
Accelerator, models, optimizers, data loaders and checkpoints.")

# Debian's changelog.Debian.gz and copyright (policy 12.5) in each package. EXCLUDE_FROM_ALL: CPack installs each component by name and
# gets it; a plain `cmake --install` (the tarball) does not.
string(TIMESTAMP ACCEL_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
foreach(comp IN LISTS CPACK_COMPONENTS_ALL)
  string(TOUPPER ${comp} _up)
  set(ACCEL_DEB_PACKAGE ${CPACK_DEBIAN_${_up}_PACKAGE_NAME})
  set(_dir ${CMAKE_BINARY_DIR}/debian/${ACCEL_DEB_PACKAGE})
  configure_file(${CMAKE_SOURCE_DIR}/cmake/debian/changelog.in ${_dir}/changelog.Debian @ONLY)
  execute_process(COMMAND gzip -9nf ${_dir}/changelog.Debian)
  install(FILES ${_dir}/changelog.Debian.gz ${CMAKE_SOURCE_DIR}/cmake/debian/copyright
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${ACCEL_DEB_PACKAGE} COMPONENT ${comp} EXCLUDE_FROM_ALL)
endforeach()

include(CPack)

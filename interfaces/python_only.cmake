# Included by the interface packages' CMakeLists.txt when RETARGET_INTERFACES_PYTHON_ONLY names this file
# (scripts/setup.sh, `make setup`), between find_package(rosidl_default_generators) and rosidl_generate_interfaces():
# drops the C++ generator and the three C++ type supports from the generators rosidl runs, keeping the C ones and
# the Python generator, which is all rclpy loads (docs/dependencies.md "Interface packages"). A colcon build, which
# does not set the variable, builds every type support as usual.
set(_retarget_kept_generators)
foreach(_extension IN LISTS AMENT_EXTENSIONS_rosidl_generate_idl_interfaces)
  if(NOT _extension MATCHES
     "^(rosidl_generator_cpp|rosidl_typesupport_cpp|rosidl_typesupport_fastrtps_cpp|rosidl_typesupport_introspection_cpp):")
    list(APPEND _retarget_kept_generators "${_extension}")
  endif()
endforeach()
set(AMENT_EXTENSIONS_rosidl_generate_idl_interfaces "${_retarget_kept_generators}")

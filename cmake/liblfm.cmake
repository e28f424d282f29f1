# liblfm: the C API (include/lfm/lfm.h, src/capi/) over the core, as a shared library exporting
# only lfm_* (SONAME liblfm.so.0) and as a static archive holding the core too; `cmake --install`
# puts them, the header, a CMake package (find_package(lfm) → lfm::lfm) and lfm.pc in place.
# The `lfm` executable links the same core (lfmcore, the objects liblfm wraps) statically.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

file(GLOB LFM_CAPI_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/capi/*.cpp)
set(LFM_SOVERSION 0)

add_library(lfm_shared SHARED ${LFM_CAPI_SOURCES})
add_library(lfm::lfm ALIAS lfm_shared)
set_target_properties(lfm_shared PROPERTIES OUTPUT_NAME lfm EXPORT_NAME lfm VERSION ${PROJECT_VERSION}
                      SOVERSION ${LFM_SOVERSION} CXX_VISIBILITY_PRESET hidden C_VISIBILITY_PRESET hidden
                      VISIBILITY_INLINES_HIDDEN ON)
target_compile_definitions(lfm_shared PRIVATE LFM_BUILDING_LIBRARY)
target_include_directories(lfm_shared PUBLIC $<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>
                           $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_link_libraries(lfm_shared PRIVATE lfmcore)
# Belt and braces beside the hidden visibility: the static libraries linked in (libcudart_static,
# ...) keep their symbols to themselves, and only lfm_* is global.
target_link_options(lfm_shared PRIVATE "LINKER:--version-script=${CMAKE_SOURCE_DIR}/cmake/liblfm.map"
                    "LINKER:--exclude-libs,ALL" "LINKER:--no-undefined")
set_property(TARGET lfm_shared APPEND PROPERTY LINK_DEPENDS ${CMAKE_SOURCE_DIR}/cmake/liblfm.map)

# liblfm.a: the API's objects and the core's in one archive (a static user links the core's
# system libraries too: `pkg-config --static --libs lfm`).
add_library(lfm_capi_static STATIC ${LFM_CAPI_SOURCES})
target_compile_definitions(lfm_capi_static PRIVATE LFM_BUILDING_LIBRARY)
target_include_directories(lfm_capi_static PUBLIC ${CMAKE_SOURCE_DIR}/include)
target_link_libraries(lfm_capi_static PUBLIC lfmcore)
set(LFM_STATIC_ARCHIVE ${CMAKE_BINARY_DIR}/liblfm.a)
add_custom_command(OUTPUT ${LFM_STATIC_ARCHIVE}
  COMMAND ${CMAKE_COMMAND} -E rm -f ${LFM_STATIC_ARCHIVE}
  COMMAND printf "CREATE %s\\nADDLIB %s\\nADDLIB %s\\nSAVE\\nEND\\n" ${LFM_STATIC_ARCHIVE}
          $<TARGET_FILE:lfm_capi_static> $<TARGET_FILE:lfmcore> | ${CMAKE_AR} -M
  DEPENDS lfm_capi_static lfmcore $<TARGET_FILE:lfm_capi_static> $<TARGET_FILE:lfmcore>
  COMMENT "Merging liblfm.a" VERBATIM)
add_custom_target(lfm_static ALL DEPENDS ${LFM_STATIC_ARCHIVE})

# Install: the executable, the libraries, the header, the CMake package and lfm.pc.
install(TARGETS lfm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS lfm_shared EXPORT lfmTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${LFM_STATIC_ARCHIVE} DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/lfm/lfm.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/lfm)
install(EXPORT lfmTargets NAMESPACE lfm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lfm)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/lfmConfig.cmake.in ${CMAKE_BINARY_DIR}/lfmConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lfm)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/lfmConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/lfmConfig.cmake ${CMAKE_BINARY_DIR}/lfmConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/lfm)
# pkg-config: the static link's system libraries, as the core links them.
set(LFM_PC_PRIVATE "-lpcre2-8 -lcurl -lcrypto ${IMAGE_LIBS_LDFLAGS} ${AUDIO_LIBS_LDFLAGS} -lstdc++ -lm -lpthread")
if(LFM_CUDA)
  string(APPEND LFM_PC_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
string(REPLACE ";" " " LFM_PC_PRIVATE "${LFM_PC_PRIVATE}")
# Relocatable: the prefix is found from the .pc file's own place (an install with --prefix works).
file(RELATIVE_PATH LFM_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
configure_file(${CMAKE_SOURCE_DIR}/cmake/lfm.pc.in ${CMAKE_BINARY_DIR}/lfm.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/lfm.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

// The checkout's paths, from the build (tests/CMakeLists.txt gives this file alone the definitions).
#include "test_util.h"

namespace lfm::test {

const char* test_data_path() { return LFM_TEST_PATH_DATA; }
const char* source_path() { return LFM_TEST_PATH_SOURCE; }
const char* lfm_binary_path() { return LFM_TEST_PATH_BINARY; }

}  // namespace lfm::test

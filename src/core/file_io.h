// Opening files named from outside (models, configs, tokenizers, templates, cache entries) so that
// nothing blocks: a FIFO opened for reading waits for a writer forever, so files are opened
// non-blocking and anything but a regular file (FIFO, socket, device, directory) is refused.
#pragma once

#include <string>
#include <string_view>

namespace lfm {

// A read-only descriptor of `path` (O_CLOEXEC, O_NONBLOCK cleared again), or an lfm::Error
// "<what> '<path>' is not a regular file (a FIFO)" / "... cannot be opened: <reason>".
int open_regular_file(const std::string& path, std::string_view what);

// The whole regular file as bytes; errors as above.
std::string read_regular_file(const std::string& path, std::string_view what);

// Whether `path` names a regular file (following symlinks), without opening it.
bool is_regular_path(const std::string& path);

// When `path` exists, it must be a regular file or a folder: anything else is an lfm::Error
// "<what> '<path>' is not a regular file or a folder (a FIFO)". A missing path passes.
void check_file_or_folder(const std::string& path, std::string_view what);

}  // namespace lfm

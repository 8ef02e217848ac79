// Columns over files named by an image folder or a manifest (internal to the source layer).
#pragma once

#include <memory>
#include <string>

#include "traincache/io/source.h"

namespace traincache::io::source {

/// Column `name` ("image", "label" or "path") of the image folder `dir`.
std::unique_ptr<Column> open_folder_column(const std::string& dir, const std::string& name, const FileOptions& files);

/// Field `name` of the manifest `path`, read as `role`.
std::unique_ptr<Column> open_manifest_column(const std::string& path, const std::string& name, Role role,
                                             const FileOptions& files);

/// `pattern` with its shell-style braces expanded (expand_shards' first step); Error(usage) when
/// they are malformed.
std::vector<std::string> brace_expansion(const std::string& pattern);

/// Field `name` of the tar shards `pattern` (source.h, open_column), read as `role`.
std::unique_ptr<Column> open_tar_column(const std::string& pattern, const std::string& name, Role role,
                                        const FileOptions& files);

}  // namespace traincache::io::source

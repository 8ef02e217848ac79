// The records that describe a cache file and a slab, shared by cache-inspect, shm-cache and the C
// ABI (libtraincache_c, which the Python package reads), so that all three report the same fields.
// Torch-free.
#pragma once

#include "traincache/base/report.h"
#include "traincache/io/cache_file.h"
#include "traincache/slab/shm_slab.h"

namespace traincache::io::describe {

/// The summary of a cache: `cache-inspect --json`'s object per file, and the fields its text shows.
report::Record cache_record(const cache::CacheInfo& c);

/// One encoder's norm statistics (`cache-inspect --stats`).
report::Record stats_record(const cache::EmbeddingStats& s);

/// `cache-inspect --json [--stats] FILE`'s object for one file: the summary, with "stats" when
/// `stats` is set. Errors as cache::read_info() and cache::compute_stats().
report::Json cache_json(const std::string& path, bool stats);

/// A slab's description (`shm-cache stat --json`'s "slab"); `counts` adds the slot counts.
report::Record slab_record(const slab::SlabInfo& i, const slab::SlotCounts* counts);

}  // namespace traincache::io::describe

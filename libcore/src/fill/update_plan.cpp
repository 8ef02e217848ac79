#include "traincache/fill/update_plan.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "traincache/base/error.h"

namespace traincache::fill {

namespace {

constexpr int64_t kAmbiguous = -2;

// Each key's row, or kAmbiguous for a key that occurs more than once.
std::unordered_map<std::string, int64_t> index_keys(const std::vector<std::string>& keys) {
  std::unordered_map<std::string, int64_t> at;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto [it, added] = at.emplace(keys[i], static_cast<int64_t>(i));
    if (!added) it->second = kAmbiguous;
  }
  return at;
}

void check_sizes(const RowIdentity& side) {
  if (!side.keys.empty() && side.keys.size() != side.digests.size())
    throw Error(Exit::internal, "update", "keys and row digests differ in number");
  if (!side.files.empty() && side.files.size() != side.digests.size())
    throw Error(Exit::internal, "update", "file and row digests differ in number");
}

// Each cache row that was not skipped, by its digest; of rows that share a digest, the first (the
// same input bytes through the same preprocessing: their embeddings differ by batch noise at most).
std::map<Digest128, int64_t> index_digests(const std::vector<Digest128>& digests, const std::vector<bool>& skipped) {
  std::map<Digest128, int64_t> at;
  for (std::size_t i = 0; i < digests.size(); ++i)
    if (!skipped[i]) at.emplace(digests[i], static_cast<int64_t>(i));
  return at;
}

// A moved row whose cache row a kept row also has, or a moved row before it, is a copy: the cache
// row stays where it was (or went), and this row copies its embeddings.
void mark_copies(UpdatePlan& plan, std::size_t old_rows) {
  std::vector<bool> taken(old_rows, false);
  for (std::size_t i = 0; i < plan.fate.size(); ++i)
    if (plan.fate[i] == RowFate::kept) taken[static_cast<std::size_t>(plan.source[i])] = true;
  for (std::size_t i = 0; i < plan.fate.size(); ++i) {
    if (plan.fate[i] != RowFate::moved) continue;
    const auto s = static_cast<std::size_t>(plan.source[i]);
    if (!taken[s]) {
      taken[s] = true;
      continue;
    }
    plan.fate[i] = RowFate::copy;
    --plan.moved;
    ++plan.copies;
  }
}

// Fills plan.source and the tallies but `removed`: find(i) is the cache row new row i has, -1 when
// it has none, kAmbiguous when its key is not unique. A row found with another digest, or not
// found, keeps a cache row of its digest if there is one (moved, or a copy where that row stays):
// of its file's digest where both sides have them, so that a renamed file finds its row.
template <class Find>
void tally(const RowIdentity& old, const std::vector<int64_t>& old_skipped, const RowIdentity& now, Find find,
           UpdatePlan& plan) {
  std::vector<bool> skipped(old.digests.size(), false);
  for (int64_t r : old_skipped)
    if (r >= 0 && r < static_cast<int64_t>(skipped.size())) skipped[static_cast<std::size_t>(r)] = true;
  const bool by_file = !old.files.empty() && !now.files.empty();
  const auto by_digest = index_digests(by_file ? old.files : old.digests, skipped);
  for (std::size_t i = 0; i < now.digests.size(); ++i) {
    const int64_t o = find(i);
    const bool same = o >= 0 && old.digests[static_cast<std::size_t>(o)] == now.digests[i];
    plan.found.push_back(o < 0 ? -1 : o);
    if (o != kAmbiguous && !same) {
      const auto moved = by_digest.find(by_file ? now.files[i] : now.digests[i]);
      if (moved != by_digest.end()) {
        ++plan.moved;
        plan.source.push_back(moved->second);
        plan.fate.push_back(RowFate::moved);
        continue;
      }
    }
    int64_t keep = -1;
    RowFate fate = RowFate::changed;
    if (o == kAmbiguous) {
      ++plan.ambiguous;
      ++plan.changed;
      fate = RowFate::ambiguous;
    } else if (o < 0) {
      ++plan.added;
      fate = RowFate::added;
    } else if (same) {
      ++plan.unchanged;
      fate = skipped[static_cast<std::size_t>(o)] ? RowFate::skipped_before : RowFate::kept;
      if (fate == RowFate::kept)
        keep = o;
      else
        ++plan.skipped_before;
    } else {
      ++plan.changed;
    }
    plan.fate.push_back(fate);
    plan.source.push_back(keep);
  }
  mark_copies(plan, old.digests.size());
}

}  // namespace

UpdatePlan match_rows(const RowIdentity& old, const std::vector<int64_t>& old_skipped, const RowIdentity& now) {
  check_sizes(old);
  check_sizes(now);
  UpdatePlan plan;
  plan.by_key = !old.keys.empty() && !now.keys.empty();
  if (!plan.by_key) {
    const auto old_rows = static_cast<int64_t>(old.digests.size()), now_rows = static_cast<int64_t>(now.digests.size());
    tally(
        old, old_skipped, now, [&](std::size_t i) { return static_cast<int64_t>(i) < old_rows ? int64_t(i) : -1; },
        plan);
    plan.removed = std::max<int64_t>(0, old_rows - now_rows);
    for (int64_t r = now_rows; r < old_rows; ++r) plan.removed_rows.push_back(r);
    return plan;
  }
  const auto old_at = index_keys(old.keys), now_at = index_keys(now.keys);
  auto find = [&](std::size_t i) -> int64_t {
    auto o = old_at.find(now.keys[i]);
    if (o == old_at.end()) return -1;
    return now_at.at(now.keys[i]) == kAmbiguous ? kAmbiguous : o->second;
  };
  tally(old, old_skipped, now, find, plan);
  for (std::size_t r = 0; r < old.keys.size(); ++r)
    if (!now_at.count(old.keys[r])) plan.removed_rows.push_back(static_cast<int64_t>(r));
  plan.removed = static_cast<int64_t>(plan.removed_rows.size());
  return plan;
}

const char* fate_name(RowFate fate) {
  static const char* names[] = {"kept", "changed", "added", "ambiguous", "skipped_before", "moved", "copy"};
  return names[static_cast<int>(fate)];
}

std::vector<int64_t> rows_to_encode(const UpdatePlan& plan) {
  std::vector<int64_t> rows;
  for (std::size_t i = 0; i < plan.source.size(); ++i)
    if (plan.source[i] < 0) rows.push_back(static_cast<int64_t>(i));
  return rows;
}

namespace {

// A fingerprint document with what an update absorbs left out: rows, content digest, the feature
// columns' row counts, labels (every label column), keys, and the batching.
nlohmann::json without_data(nlohmann::json fp) {
  auto& input = fp["input"];
  for (const char* k : {"rows", "content_xxh3", "labels", "label_columns", "keys"}) input.erase(k);
  if (input.contains("features"))
    for (auto& [name, col] : input["features"].items())
      if (col.is_object() && col.contains("shape") && col["shape"].is_array() && !col["shape"].empty())
        col["shape"][0] = 0;
  if (fp.contains("options") && fp["options"].is_object())
    for (const char* k : {"batch_size", "length_window", "max_tokens"}) fp["options"].erase(k);
  return fp;
}

}  // namespace

bool only_data_changed(const std::string& old_json, const std::string& now_json) {
  auto old = nlohmann::json::parse(old_json, nullptr, false), now = nlohmann::json::parse(now_json, nullptr, false);
  // A fill's fingerprint has its input as an object; a merged cache's (job and shards) has none.
  auto fill_like = [](const nlohmann::json& fp) {
    return fp.is_object() && fp.contains("input") && fp["input"].is_object();
  };
  if (!fill_like(old) || !fill_like(now)) return false;
  return without_data(old) == without_data(now);
}

}  // namespace traincache::fill

// What gc-train can tell of a checkpoint file without LibTorch: where it lies, and whether the
// payload it carries still matches the digest written beside it (train/checkpoint.h writes and
// reads the file itself, with LibTorch). gc-train checks a checkpoint it is asked to resume from
// before it loads LibTorch, so that a damaged one is refused at once.
#pragma once

#include <string>

namespace traincache::train {

/// The refusal of a file that is no checkpoint archive (or one of the format before the digest).
inline constexpr const char* kUnreadableCheckpoint = "unreadable checkpoint (damaged, or written by an older gc-train)";
/// The refusal of a checkpoint whose payload does not match its digest.
inline constexpr const char* kDamagedCheckpoint = "checkpoint damaged: its contents do not match their digest";

/// The checkpoint file of a --checkpoint-dir.
std::string checkpoint_path(const std::string& dir);

/// Refuses (Error(data) naming `path`, with one of the two texts above) a file that is no zip
/// archive, and one whose payload member's bytes do not digest to the digest its record stores.
/// Returns when they match, and whenever the archive is not laid out as save_checkpoint lays it
/// out (a member missing, compressed, a record it cannot find its way through), or cannot be read
/// for another reason: load_checkpoint, which reads the file with LibTorch, decides then.
void check_checkpoint_digest(const std::string& path);

}  // namespace traincache::train

/* The C ABI of traincache (libtraincache_c.so): what other languages call, through ctypes or any
 * C FFI. The Python package (python/traincache) is its first user. Plain C; no LibTorch.
 *
 * Conventions. Every function that can fail returns an int: a value >= 0 is its result, a
 * negative value is minus the exit code the tools would end with (-64 usage, -65 bad data, -66
 * missing input, -69 unavailable, -70 internal, -73 cannot create, -74 I/O), and
 * tc_last_error() then holds the one-line message ("<subject>: <detail>") for this thread.
 * Strings handed out through `char**` are allocated by the library: release them with tc_free().
 * Slab offsets are bytes from the start of the shared-memory object, so that a caller that maps
 * the object itself (tc_slab_fd()) finds an item at its own base + offset. The slab layout is in
 * docs/shm-cache.md; the slot protocol (EMPTY -> WRITING -> FILLED) is the one every tool uses.
 * A slab whose object is truncated while in use never kills the caller inside these functions:
 * the bus error is caught and the call returns -74 ("the slab's object was truncated while in
 * use"); tc_slab_slot and tc_slab_state return -74 too. Reading the mapping of tc_slab_fd()
 * directly carries no such guard. */
#ifndef TRAINCACHE_C_API_H
#define TRAINCACHE_C_API_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TC_API __attribute__((visibility("default")))
#else
#define TC_API
#endif

/** Incremented when a function changes meaning or signature; callers check it at load. */
#define TC_ABI_VERSION 4

/** TC_ABI_VERSION of the loaded library. */
TC_API int tc_abi_version(void);
/** "VERSION (git REV)" of the library, as the tools' --version says it. */
TC_API const char* tc_version(void);
/** The message of the last failure in this thread ("" when none); valid until the next call. */
TC_API const char* tc_last_error(void);
/** Releases a string handed out by the library (NULL is fine). */
TC_API void tc_free(char* s);

/** The JSON object `cache-inspect --json [--stats] PATH` prints for the file (its "files"[0]),
 * in *json. 0, or -65 (not a cache, corrupt, newer format), -66 (missing). */
TC_API int tc_cache_describe(const char* path, int stats, char** json);

/** 0 when the file's structure is sound as `cache-inspect --check` checks it (every dataset of the
 * cache's rows, float32 or float16 embeddings, what its fingerprint promises, /skipped and /keys as
 * cache-fill writes them); else -65 with "PATH: damaged: <the first problem> (cache-inspect --check
 * lists what is wrong)" (-66 missing). Embedding values (NaN) are not read. */
TC_API int tc_cache_check_structure(const char* path);

/** A mapped slab (one attachment: its own descriptor and mapping). */
typedef struct tc_slab tc_slab;

/** Creates a slab from a JSON object: name, length, layout ("fixed" | "variable"), dtype (a name
 * of docs/shm-cache.md), dims (fixed), slots or limit_bytes, selection ("first" | "hashed"), seed,
 * mode, content_id, temporary, tool. Unknown keys are refused (-64). 0 and *out, or -64 / -73. */
TC_API int tc_slab_create(const char* options_json, tc_slab** out);
/** Attaches (writable) to the slab that `options_json` (as tc_slab_create's) names, or creates it
 * when there is none, the way every traincache tool shares a slab (of processes racing to create
 * it, the losers attach to the winner's); *created says whether this call made it. The slab must
 * then hold what the options describe: another user's slab is refused unless `trust_owner`, and
 * one of another content id, layout, element type, item shape, length or selection is refused
 * (-65, naming what it holds and what was wanted). -73 when it cannot be made (no room). */
TC_API int tc_slab_open_shared(const char* options_json, int trust_owner, tc_slab** out, int* created);
/** Attaches to slab `name` (without the prefix), read-only unless `writable`. The header is
 * validated against the object first. 0 and *out, or -69 (no such slab), -65 (corrupt, foreign). */
TC_API int tc_slab_attach(const char* name, int writable, tc_slab** out);
/** Unmaps and closes (the object stays until tc_slab_remove()). NULL is fine. */
TC_API void tc_slab_close(tc_slab* slab);
/** `shm-cache stat --json`'s "slab" object, in *json; with `counts` the slot counts too. */
TC_API int tc_slab_describe(const tc_slab* slab, int counts, char** json);
/** The slab's file descriptor (owned by the slab: duplicate it to keep it). */
TC_API int tc_slab_fd(const tc_slab* slab);
/** The slot of dataset index `index`, or -1 when the index is not cacheable (or out of range). */
TC_API int64_t tc_slab_slot(const tc_slab* slab, uint64_t index);
/** State of the slot of `index`: 0 empty, 1 writing, 2 filled, 255 invalid (a corrupt word);
 * -1 when the index is not cacheable. Read with acquire ordering. */
TC_API int tc_slab_state(const tc_slab* slab, uint64_t index);
/** 1 when `index` is filled, with the item's *offset and *bytes (acquire ordering: the bytes are
 * complete); 0 for a miss (any other state, not cacheable). */
TC_API int tc_slab_locate(const tc_slab* slab, uint64_t index, uint64_t* offset, uint64_t* bytes);
/** Copies the item at `index` into `dst` (room for `capacity` bytes) when it is filled: 1 and
 * *bytes; 0 for a miss; -65 when the item is larger than `capacity` (*bytes says how large).
 * `bytes` may be NULL. */
TC_API int tc_slab_read(const tc_slab* slab, uint64_t index, void* dst, uint64_t capacity, uint64_t* bytes);
/** Stores `bytes` bytes from `src` at `index` (claim, copy, publish, as one call): 1 when stored,
 * 0 when nothing was claimed (as tc_slab_begin_write), -64 read-only. A failure after the claim
 * gives the slot back. */
TC_API int tc_slab_put(tc_slab* slab, uint64_t index, const void* src, uint64_t bytes);
/** Try-begin-write: claims the slot of `index` for an item of `bytes` (EMPTY -> WRITING with this
 * process's pid, by compare-and-swap; variable layouts also reserve the bytes in the arena).
 * 1 and *offset where the caller copies the item; 0 when nothing was claimed (not cacheable,
 * already filled or being written, wrong size for a fixed layout, arena full); -64 read-only. */
TC_API int tc_slab_begin_write(tc_slab* slab, uint64_t index, uint64_t bytes, uint64_t* offset);
/** Publishes this process's claim on `index` (WRITING -> FILLED, release ordering): 1, or 0 when
 * the slot is not WRITING by this process (nothing changes); -64 read-only. */
TC_API int tc_slab_commit(tc_slab* slab, uint64_t index);
/** Gives back this process's claim on `index` (WRITING -> EMPTY): 1, 0 or -64 as tc_slab_commit. */
TC_API int tc_slab_abort(tc_slab* slab, uint64_t index);
/** Returns to EMPTY every slot left WRITING by a process that no longer exists, and every invalid
 * one: the number repaired, or -64 read-only. */
TC_API int64_t tc_slab_repair(tc_slab* slab);
/** Removes slab `name`'s object: 0, or -69 (no such slab), -64 (bad name), -74. */
TC_API int tc_slab_remove(const char* name);

#ifdef __cplusplus
}
#endif

#endif /* TRAINCACHE_C_API_H */

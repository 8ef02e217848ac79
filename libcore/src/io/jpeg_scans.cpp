// Progressive JPEG scans entropy-decoded in place of libjpeg's jdphuff.c (see jpeg_scans.h). libjpeg
// sets up each scan through its entropy module's start_pass: ours calls libjpeg's first (it checks
// the scan's parameters, keeps the progression's bookkeeping, coef_bits, that block smoothing reads,
// and checks the Huffman tables), then sets up its own state and makes the coefficient controller's
// consume_data its own, which decodes the whole scan into libjpeg's coefficient arrays at once
// (libjpeg's calls the entropy decoder MCU by MCU). It is put in place from the progress monitor,
// which jpeg_start_decompress calls once the first scan is set up and before any of its data is read.
//
// What makes it faster than libjpeg's (0.6 of its time on the photo set's progressive files):
// - bits from a 64-bit buffer refilled 8 bytes at a time where no 0xFF byte is among them, and no
//   state saved per MCU for a suspended input (the file is in memory);
// - a mask per block of its nonzero AC coefficients, in zigzag order, kept as the scans write them:
//   a refinement scan finds the coefficients that take a correction bit and the zero one a new
//   coefficient goes to from the mask, without reading the block, and applies the bits without
//   branches on them (libjpeg tests each coefficient in turn);
// - blocks in an end-of-band run that have no nonzero coefficient in the band are not touched.
#include "jpeg_scans.h"

#ifdef TRAINCACHE_JPEG_SCANS

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>  // jpeglib.h uses FILE
#include <cstring>
#include <type_traits>

// clang-format off
#define JPEG_INTERNALS  // jpegint.h: the entropy decoder's and the marker reader's methods
#include <jpeglib.h>
// clang-format on

namespace traincache::io::image {

namespace {

constexpr int kLook = 10;  // bits a Huffman code is looked up by in one step

// Zigzag index -> natural (row-major) index in an 8x8 block (T.81, figure A.6).
constexpr uint8_t kNatural[64] = {0,  1,  8,  16, 9,  2,  3,  10, 17, 24, 32, 25, 18, 11, 4,  5,
                                  12, 19, 26, 33, 40, 48, 41, 34, 27, 20, 13, 6,  7,  14, 21, 28,
                                  35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51,
                                  58, 59, 52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63};

// Index of x's set bit number r (from 0, lowest first), 64 where x has no more than r: by the bytes'
// counts of set bits and their running sums, then a table within the byte.
struct BitSelect {
  uint8_t at[256][8];
  BitSelect() {
    for (int v = 0; v < 256; ++v)
      for (int r = 0; r < 8; ++r) {
        at[v][r] = 8;
        for (int bit = 0, n = 0; bit < 8; ++bit)
          if (v >> bit & 1 && n++ == r) {
            at[v][r] = static_cast<uint8_t>(bit);
            break;
          }
      }
  }
};

const BitSelect& bit_select() {
  static const BitSelect table;
  return table;
}

inline int select_bit(uint64_t x, int r, const BitSelect& t) {
  constexpr uint64_t ones = 0x0101010101010101, high = 0x8080808080808080;
  uint64_t n = x - (x >> 1 & 0x5555555555555555);
  n = (n & 0x3333333333333333) + (n >> 2 & 0x3333333333333333);
  n = (n + (n >> 4)) & 0x0f0f0f0f0f0f0f0f;
  const uint64_t sums = n * ones;  // byte i: set bits in bytes 0..i
  const uint64_t past = ((sums | high) - static_cast<uint64_t>(r + 1) * ones) & high;
  if (past == 0) return 64;
  const int byte = __builtin_ctzll(past) >> 3;
  const int before = static_cast<int>((sums << 8) >> (8 * byte) & 0xff);
  return 8 * byte + t.at[x >> (8 * byte) & 0xff][r - before];
}

// Bits [k, 64) set (none from k = 64 on).
inline uint64_t from(int k) { return k >= 64 ? 0 : ~uint64_t{0} << k; }

// One Huffman table, for decoding: a code of up to kLook bits in one lookup, longer ones by length.
struct Huffman {
  uint16_t fast[1 << kLook];  // (length << 8) | symbol, by the next kLook bits; 0: a longer code
  int32_t maxcode[17];        // the largest code of each length, -1 where none
  int32_t offset[17];         // a code of length l is symbol [code + offset[l]]
  int count;
  uint8_t symbols[256];

  void build(const JHUFF_TBL& t) {
    std::memset(fast, 0, sizeof fast);
    int code = 0, k = 0;
    for (int l = 1; l <= 16; ++l) {
      offset[l] = k - code;
      for (int i = 0; i < t.bits[l] && k < 256; ++i, ++k, ++code) {
        symbols[k] = t.huffval[k];
        if (l > kLook) continue;
        const int first = code << (kLook - l), n = 1 << (kLook - l);
        for (int j = 0; j < n; ++j) fast[first + j] = static_cast<uint16_t>(l << 8 | t.huffval[k]);
      }
      maxcode[l] = t.bits[l] ? code - 1 : -1;
      code <<= 1;
    }
    count = k;
  }
};

// The scan's bits: acc holds n of them at its top (the rest zero); past a marker, zeros (pad of them).
struct Bits {
  uint64_t acc = 0;
  int n = 0, pad = 0;
  bool marker = false;
  const JOCTET* p = nullptr;
  const JOCTET* end = nullptr;
};

}  // namespace

struct ProgressiveScans::State {
  jpeg_progress_mgr progress;  // first: libjpeg's cinfo->progress points here
  void (*libjpeg_start_pass)(j_decompress_ptr) = nullptr;
  bool installed = false, gave_up = false;
  int scans = 0;
  Bits bits;
  int Ss = 0, Se = 0, p1 = 0, m1 = 0, Al = 0;
  uint64_t band = 0;  // zigzag indices [Ss, Se]
  unsigned eobrun = 0, restarts_to_go = 0;
  int last_dc[MAX_COMPS_IN_SCAN] = {};
  const Huffman* dc[MAX_COMPS_IN_SCAN] = {};
  const Huffman* ac = nullptr;
  Huffman dc_tables[NUM_HUFF_TBLS], ac_tables[NUM_HUFF_TBLS];
  uint64_t* nonzero[MAX_COMPONENTS] = {};  // per component and block: its nonzero AC coefficients
  const BitSelect* select = nullptr;
};

namespace {

using State = ProgressiveScans::State;
static_assert(std::is_standard_layout_v<State>, "cinfo->progress is cast back to State");

State& state(j_decompress_ptr c) { return *reinterpret_cast<State*>(c->progress); }

// Unwinds the decode through libjpeg's error_exit (the caller's longjmp); the caller sees gave_up.
[[noreturn]] void give_up(j_decompress_ptr c) {
  state(c).gave_up = true;
  c->err->msg_code = JERR_BAD_HUFF_TABLE;
  (*c->err->error_exit)(reinterpret_cast<j_common_ptr>(c));
  __builtin_unreachable();
}

int next_byte(j_decompress_ptr c, Bits& b) {
  if (b.p == b.end) {
    jpeg_source_mgr* src = c->src;
    src->next_input_byte = b.p;
    src->bytes_in_buffer = 0;
    if (!(*src->fill_input_buffer)(c) || src->bytes_in_buffer == 0) give_up(c);
    b.p = src->next_input_byte;
    b.end = b.p + src->bytes_in_buffer;
  }
  return *b.p++;
}

// Byte by byte, as libjpeg reads: 0xFF 0x00 is a data byte 0xFF, 0xFF before anything else a marker
// (left in cinfo->unread_marker for libjpeg's marker reader), after which only zeros come.
[[gnu::noinline]] void refill_slow(j_decompress_ptr c, Bits& b) {
  while (b.n <= 56) {
    if (b.marker) {
      b.n += 8;
      b.pad += 8;
      continue;
    }
    const int v = next_byte(c, b);
    if (v == 0xFF) {
      int m;
      do m = next_byte(c, b);
      while (m == 0xFF);
      if (m != 0) {
        c->unread_marker = m;
        b.marker = true;
        continue;
      }
    }
    b.acc |= uint64_t(v) << (56 - b.n);
    b.n += 8;
  }
}

// Fills acc to at least 57 bits (n <= 56 on entry).
inline void refill(j_decompress_ptr c, Bits& b) {
  if (!b.marker && b.end - b.p >= 8) {
    uint64_t w;
    std::memcpy(&w, b.p, 8);
    w = __builtin_bswap64(w);
    const uint64_t x = ~w;  // a byte of w is 0xFF where x has a zero byte
    if (((x - 0x0101010101010101) & ~x & 0x8080808080808080) == 0) {
      const int take = (64 - b.n) >> 3, filled = b.n + 8 * take;
      uint64_t add = w >> b.n;
      if (filled < 64) add &= ~uint64_t{0} << (64 - filled);
      b.acc |= add;
      b.n = filled;
      b.p += take;
      return;
    }
  }
  refill_slow(c, b);
}

inline void skip(Bits& b, int l) {
  b.acc <<= l;
  b.n -= l;
}

// The next l bits (1 <= l <= 32, at least l in acc).
inline uint32_t take(Bits& b, int l) {
  const auto v = static_cast<uint32_t>(b.acc >> (64 - l));
  skip(b, l);
  return v;
}

// T.81 F.12: the l bits v as a signed value.
inline int extend(uint32_t v, int l) {
  const int x = static_cast<int>(v);
  return x < (1 << (l - 1)) ? x - (1 << l) + 1 : x;
}

[[gnu::noinline]] int decode_long(j_decompress_ptr c, Bits& b, const Huffman& h) {
  for (int l = kLook + 1; l <= 16; ++l) {
    const auto code = static_cast<int64_t>(b.acc >> (64 - l));
    if (code > h.maxcode[l]) continue;
    const int64_t i = code + h.offset[l];
    if (i < 0 || i >= h.count) break;
    skip(b, l);
    return h.symbols[i];
  }
  give_up(c);  // no table's code: libjpeg warns and decodes zeros
}

// One Huffman-coded symbol (at least 16 bits in acc).
inline int decode(j_decompress_ptr c, Bits& b, const Huffman& h) {
  const unsigned e = h.fast[b.acc >> (64 - kLook)];
  if (e == 0) return decode_long(c, b, h);
  skip(b, static_cast<int>(e >> 8));
  return static_cast<int>(e & 0xff);
}

void load_source(j_decompress_ptr c, Bits& b) {
  b = Bits{};
  b.p = c->src->next_input_byte;
  b.end = b.p + c->src->bytes_in_buffer;
}

// Where a segment of the scan's data ends (its end or a restart marker): the bits read were the
// scan's, not zeros past a marker (libjpeg would have filled the rest with grey), and libjpeg's
// source is where this decoder has read to.
void end_segment(j_decompress_ptr c, const Bits& b) {
  if (b.pad > b.n) give_up(c);
  c->src->next_input_byte = b.p;
  c->src->bytes_in_buffer = static_cast<std::size_t>(b.end - b.p);
}

// A restart marker where the interval ends, read by libjpeg's marker reader; anything else there
// (a damaged file: libjpeg resynchronises, with warnings) is left to libjpeg.
[[gnu::noinline]] void restart(j_decompress_ptr c, State& s, Bits& b) {
  const int want = JPEG_RST0 + c->marker->next_restart_num;
  const bool there = b.marker ? c->unread_marker == want : b.end - b.p >= 2 && b.p[0] == 0xFF && b.p[1] == want;
  if (!there) give_up(c);
  end_segment(c, b);
  if (!(*c->marker->read_restart_marker)(c)) give_up(c);
  load_source(c, b);
  for (int& dc : s.last_dc) dc = 0;
  s.eobrun = 0;
  s.restarts_to_go = c->restart_interval;
}

// Before each MCU: a restart where its interval ends.
inline void next_mcu(j_decompress_ptr c, State& s, Bits& b) {
  if (c->restart_interval) {
    if (s.restarts_to_go == 0) restart(c, s, b);
    --s.restarts_to_go;
  }
}

inline void dc_first(j_decompress_ptr c, State& s, Bits& b, JCOEF* block, int ci, uint64_t&) {
  if (b.n < 32) refill(c, b);
  const int l = decode(c, b, *s.dc[ci]);
  if (l > 15) give_up(c);
  const int diff = l ? extend(take(b, l), l) : 0;
  int& last = s.last_dc[ci];
  if ((last >= 0 && diff > INT_MAX - last) || (last < 0 && diff < INT_MIN - last)) give_up(c);
  last += diff;
  block[0] = static_cast<JCOEF>(static_cast<unsigned>(last) << s.Al);
}

inline void dc_refine(j_decompress_ptr c, State& s, Bits& b, JCOEF* block, int, uint64_t&) {
  if (b.n < 1) refill(c, b);
  if (take(b, 1)) block[0] = static_cast<JCOEF>(block[0] | s.p1);
}

inline void ac_first(j_decompress_ptr c, State& s, Bits& b, JCOEF* block, int, uint64_t& nonzero) {
  if (s.eobrun > 0) {
    --s.eobrun;
    return;
  }
  for (int k = s.Ss; k <= s.Se; ++k) {
    if (b.n < 32) refill(c, b);
    const int symbol = decode(c, b, *s.ac);
    const int run = symbol >> 4, l = symbol & 15;
    if (l) {
      k += run;
      if (k > s.Se) give_up(c);
      const auto v = static_cast<JCOEF>(static_cast<unsigned>(extend(take(b, l), l)) << s.Al);
      block[kNatural[k]] = v;
      nonzero = (nonzero & ~(uint64_t{1} << k)) | uint64_t{v != 0} << k;
    } else if (run == 15) {
      k += 15;
    } else {
      s.eobrun = (1u << run) + (run ? take(b, run) : 0) - 1;
      break;
    }
  }
}

// Correction bits for the coefficients in `m` (zigzag indices, already nonzero), in order: a 1 adds
// the bit being refined to the coefficient's magnitude; applied without branches on the bits, which
// are close to random.
inline void correct(j_decompress_ptr c, Bits& b, const State& s, JCOEF* block, uint64_t m) {
  for (; m; m &= m - 1) {
    if (b.n == 0) refill(c, b);
    const int bit = static_cast<int>(b.acc >> 63);
    skip(b, 1);
    JCOEF& x = block[kNatural[__builtin_ctzll(m)]];
    const int add = x >= 0 ? s.p1 : s.m1;
    const int on = bit & static_cast<int>((x & s.p1) == 0);
    x = static_cast<JCOEF>(x + (add & -on));
  }
}

inline void ac_refine(j_decompress_ptr c, State& s, Bits& b, JCOEF* block, int, uint64_t& mask) {
  // Nonzero before this scan; the coefficients it makes nonzero lie behind k when it looks again.
  const uint64_t nonzero = mask & s.band;
  int k = s.Ss;
  if (s.eobrun == 0) {
    while (k <= s.Se) {
      if (b.n < 32) refill(c, b);
      const int symbol = decode(c, b, *s.ac);
      const int run = symbol >> 4;
      int value = 0;
      if (symbol & 15) {
        if ((symbol & 15) != 1) give_up(c);  // a new coefficient is 1 bit: libjpeg warns
        value = take(b, 1) ? s.p1 : s.m1;
      } else if (run != 15) {
        s.eobrun = (1u << run) + (run ? take(b, run) : 0);
        break;
      }
      // Past run zero coefficients (with correction bits for the nonzero ones between) to the
      // next zero one, where the new coefficient goes.
      const uint64_t zeros = ~nonzero & s.band & from(k);
      int at;
      if (run < 2) {
        const uint64_t z = run ? zeros & (zeros - 1) : zeros;
        at = z ? __builtin_ctzll(z) : s.Se + 1;
      } else {
        at = std::min(select_bit(zeros, run, *s.select), s.Se + 1);
      }
      correct(c, b, s, block, nonzero & from(k) & ~from(at));
      k = at;
      if (value) {
        if (k > s.Se) give_up(c);
        block[kNatural[k]] = static_cast<JCOEF>(value);
        mask |= uint64_t{1} << k;
      }
      ++k;
    }
  }
  if (s.eobrun > 0) {
    correct(c, b, s, block, nonzero & from(k));
    --s.eobrun;
  }
}

using BlockDecoder = void (*)(j_decompress_ptr, State&, Bits&, JCOEF*, int, uint64_t&);

// One iMCU row of a scan of one component: its rows of blocks, one block an MCU.
template <BlockDecoder decode_block>
void component_rows(j_decompress_ptr c, State& s, Bits& b, JBLOCKARRAY rows) {
  const jpeg_component_info* comp = c->cur_comp_info[0];
  const int n = c->input_iMCU_row + 1 < c->total_iMCU_rows ? comp->v_samp_factor : comp->last_row_height;
  for (int y = 0; y < n; ++y) {
    const JDIMENSION row = c->input_iMCU_row * comp->v_samp_factor + y;
    uint64_t* masks = s.nonzero[comp->component_index] + std::size_t{row} * comp->width_in_blocks;
    for (JDIMENSION x = 0; x < c->MCUs_per_row; ++x) {
      next_mcu(c, s, b);
      decode_block(c, s, b, rows[y][x], 0, masks[x]);
    }
  }
}

// One iMCU row of an interleaved scan (DC only): each MCU's blocks, component by component.
template <BlockDecoder decode_block>
void interleaved_row(j_decompress_ptr c, State& s, Bits& b, JBLOCKARRAY* rows) {
  uint64_t unused = 0;
  for (JDIMENSION x = 0; x < c->MCUs_per_row; ++x) {
    next_mcu(c, s, b);
    for (int ci = 0; ci < c->comps_in_scan; ++ci) {
      const jpeg_component_info* comp = c->cur_comp_info[ci];
      for (int y = 0; y < comp->MCU_height; ++y)
        for (int i = 0; i < comp->MCU_width; ++i)
          decode_block(c, s, b, rows[ci][y][x * comp->MCU_width + i], ci, unused);
    }
  }
}

// The whole scan into libjpeg's coefficient arrays, in place of its consume_data (which calls the
// entropy decoder MCU by MCU): as it does, iMCU row by row, then libjpeg's end of the input pass.
template <BlockDecoder decode_block>
int consume_scan(j_decompress_ptr c) {
  State& s = state(c);
  Bits b = s.bits;
  for (; c->input_iMCU_row < c->total_iMCU_rows; ++c->input_iMCU_row) {
    JBLOCKARRAY rows[MAX_COMPS_IN_SCAN];
    for (int ci = 0; ci < c->comps_in_scan; ++ci) {
      const jpeg_component_info* comp = c->cur_comp_info[ci];
      rows[ci] = (*c->mem->access_virt_barray)(
          reinterpret_cast<j_common_ptr>(c), c->coef->coef_arrays[comp->component_index],
          c->input_iMCU_row * comp->v_samp_factor, static_cast<JDIMENSION>(comp->v_samp_factor), TRUE);
    }
    c->master->last_good_iMCU_row = c->input_iMCU_row;
    if (c->comps_in_scan == 1)
      component_rows<decode_block>(c, s, b, rows[0]);
    else
      interleaved_row<decode_block>(c, s, b, rows);
  }
  end_segment(c, b);
  s.bits = b;
  (*c->inputctl->finish_input_pass)(c);
  return JPEG_SCAN_COMPLETED;
}

extern "C" int consume_dc_first(j_decompress_ptr c) { return consume_scan<dc_first>(c); }
extern "C" int consume_dc_refine(j_decompress_ptr c) { return consume_scan<dc_refine>(c); }
extern "C" int consume_ac_first(j_decompress_ptr c) { return consume_scan<ac_first>(c); }
extern "C" int consume_ac_refine(j_decompress_ptr c) { return consume_scan<ac_refine>(c); }

// This decoder's state for the scan libjpeg has just set up, and its consume_data for the scan.
void start_scan(j_decompress_ptr c) {
  State& s = state(c);
  ++s.scans;
  s.Ss = c->Ss;
  s.Se = c->Se;
  s.Al = c->Al;
  s.p1 = 1 << c->Al;
  s.m1 = static_cast<int>(~0u << c->Al);
  s.band = from(c->Ss) & ~from(c->Se + 1);
  s.eobrun = 0;
  s.restarts_to_go = c->restart_interval;
  for (int& dc : s.last_dc) dc = 0;
  const bool dc = c->Ss == 0;
  for (int ci = 0; ci < c->comps_in_scan; ++ci) {
    const jpeg_component_info* comp = c->cur_comp_info[ci];
    if (dc && c->Ah == 0) {
      s.dc_tables[comp->dc_tbl_no].build(*c->dc_huff_tbl_ptrs[comp->dc_tbl_no]);
      s.dc[ci] = &s.dc_tables[comp->dc_tbl_no];
    } else if (!dc) {
      s.ac_tables[comp->ac_tbl_no].build(*c->ac_huff_tbl_ptrs[comp->ac_tbl_no]);
      s.ac = &s.ac_tables[comp->ac_tbl_no];
    }
  }
  load_source(c, s.bits);
  // libjpeg's start_input_pass makes the coefficient controller's consume_data the input's next.
  c->coef->consume_data =
      dc ? (c->Ah == 0 ? consume_dc_first : consume_dc_refine) : (c->Ah == 0 ? consume_ac_first : consume_ac_refine);
}

extern "C" void start_pass(j_decompress_ptr c) {
  (*state(c).libjpeg_start_pass)(c);
  start_scan(c);
}

// jpeg_start_decompress calls this before reading each part of the input, the first time with the
// first scan set up by libjpeg (its entropy decoder and consume_data chosen) and none of its data
// read.
extern "C" void on_progress(j_common_ptr common) {
  auto c = reinterpret_cast<j_decompress_ptr>(common);
  State& s = state(c);
  if (s.installed || common->is_decompressor == FALSE || c->entropy == nullptr || c->coef == nullptr) return;
  s.installed = true;
  s.libjpeg_start_pass = c->entropy->start_pass;
  for (int ci = 0; ci < c->num_components; ++ci) {
    const jpeg_component_info& comp = c->comp_info[ci];
    const std::size_t bytes = sizeof(uint64_t) * comp.width_in_blocks * comp.height_in_blocks;
    s.nonzero[ci] = static_cast<uint64_t*>((*c->mem->alloc_large)(common, JPOOL_IMAGE, bytes));
    std::memset(s.nonzero[ci], 0, bytes);
  }
  c->entropy->start_pass = start_pass;
  start_scan(c);
  c->inputctl->consume_input = c->coef->consume_data;
}

}  // namespace

ProgressiveScans::ProgressiveScans() : s_(std::make_unique<State>()) {
  s_->progress = jpeg_progress_mgr{};
  s_->progress.progress_monitor = on_progress;
  s_->select = &bit_select();
}

ProgressiveScans::~ProgressiveScans() = default;

void ProgressiveScans::attach(jpeg_decompress_struct& c) {
  s_->installed = false;
  s_->gave_up = false;
  s_->scans = 0;
  c.progress = c.progressive_mode && !c.arith_code ? &s_->progress : nullptr;
}

void ProgressiveScans::detach(jpeg_decompress_struct& c) { c.progress = nullptr; }

bool ProgressiveScans::gave_up() const { return s_->gave_up; }

int ProgressiveScans::scans() const { return s_->scans; }

bool ProgressiveScans::built() { return true; }

}  // namespace traincache::io::image

#else

namespace traincache::io::image {

struct ProgressiveScans::State {};
ProgressiveScans::ProgressiveScans() = default;
ProgressiveScans::~ProgressiveScans() = default;
void ProgressiveScans::attach(jpeg_decompress_struct&) {}
void ProgressiveScans::detach(jpeg_decompress_struct&) {}
bool ProgressiveScans::gave_up() const { return false; }
int ProgressiveScans::scans() const { return 0; }
bool ProgressiveScans::built() { return false; }

}  // namespace traincache::io::image

#endif

// See lfm2vl_preprocess.h. Every integer/float step follows the Python code it names, with the
// same types: Python's float is double, round() is round-half-to-even (std::nearbyint in the
// default rounding mode), int/int is a correctly rounded double division.
#include "image/lfm2vl_preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "image/resize.h"

namespace lfm::image {

namespace {

// ---- configuration ----

int get_int(const nlohmann::json& j, const char* key, int def, int lo, int hi) {
  if (!j.contains(key) || j[key].is_null()) return def;
  const auto& v = j[key];
  LFM_CHECK(v.is_number_integer(), "image: processor config '", key, "' must be an integer, got ", v.dump());
  const int64_t x = v.get<int64_t>();
  LFM_CHECK(x >= lo && x <= hi, "image: processor config '", key, "' = ", x, " is outside [", lo, ", ", hi, "]");
  return int(x);
}

bool get_bool(const nlohmann::json& j, const char* key, bool def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  LFM_CHECK(j[key].is_boolean(), "image: processor config '", key, "' must be true or false, got ", j[key].dump());
  return j[key].get<bool>();
}

double get_positive(const nlohmann::json& j, const char* key, double def) {
  if (!j.contains(key) || j[key].is_null()) return def;
  const auto& v = j[key];
  LFM_CHECK(v.is_number(), "image: processor config '", key, "' must be a number, got ", v.dump());
  const double x = v.get<double>();
  LFM_CHECK(std::isfinite(x) && x > 0, "image: processor config '", key, "' = ", v.dump(), " must be positive");
  return x;
}

// image_mean / image_std: one number or three (HF accepts float | list[float]).
void get_triple(const nlohmann::json& j, const char* key, float* out, bool nonzero) {
  if (!j.contains(key) || j[key].is_null()) return;
  const auto& v = j[key];
  auto one = [&](const nlohmann::json& x) {
    LFM_CHECK(x.is_number(), "image: processor config '", key, "' must hold numbers, got ", v.dump());
    const double d = x.get<double>();
    LFM_CHECK(std::isfinite(d) && (!nonzero || d != 0), "image: processor config '", key, "' = ", v.dump(),
              nonzero ? " must be finite and non-zero" : " must be finite");
    return float(d);
  };
  if (v.is_array()) {
    LFM_CHECK(v.size() == 3, "image: processor config '", key, "' must have 3 values (RGB), got ", v.dump());
    for (int c = 0; c < 3; ++c) out[c] = one(v[c]);
  } else {
    out[0] = out[1] = out[2] = one(v);
  }
}

// ---- HF's size arithmetic ----

int64_t round_by_factor(int64_t number, int64_t factor) {  // round(number / factor) * factor
  return int64_t(std::nearbyint(double(number) / double(factor))) * factor;
}

// Lfm2VlImageProcessorFast.smart_resize → (height, width).
std::pair<int64_t, int64_t> smart_resize(int64_t height, int64_t width, const ProcessorConfig& c) {
  const int64_t total = int64_t(c.encoder_patch_size) * c.downsample_factor;
  const int64_t unit = total * total;
  const int64_t min_pixels = c.min_image_tokens * unit, max_pixels = c.max_image_tokens * unit;
  int64_t h_bar = std::max(total, round_by_factor(height, total));
  int64_t w_bar = std::max(total, round_by_factor(width, total));
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(double(height * width) / double(max_pixels));
    h_bar = std::max(total, int64_t(std::floor(double(height) / beta / double(total))) * total);
    w_bar = std::max(total, int64_t(std::floor(double(width) / beta / double(total))) * total);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(double(min_pixels) / double(height * width));
    h_bar = int64_t(std::ceil(double(height) * beta / double(total))) * total;
    w_bar = int64_t(std::ceil(double(width) * beta / double(total))) * total;
  }
  return {h_bar, w_bar};
}

// _is_image_too_large: note the floor of encoder_patch_size here, not smart_resize's patch·factor.
bool is_image_too_large(int64_t height, int64_t width, const ProcessorConfig& c) {
  const int64_t total = int64_t(c.encoder_patch_size) * c.downsample_factor;
  const int64_t h_bar = std::max<int64_t>(c.encoder_patch_size, round_by_factor(height, total));
  const int64_t w_bar = std::max<int64_t>(c.encoder_patch_size, round_by_factor(width, total));
  const double limit = double(int64_t(c.max_image_tokens) * total * total) * c.max_pixels_tolerance;
  return double(h_bar * w_bar) > limit;  // exact: both sides are integers far below 2^53 / doubles
}

// CPython 3.11's hash of the tuple (a, b) of small non-negative ints (tuplehash, xxHash-based).
uint64_t py_tuple_hash(int64_t a, int64_t b) {
  constexpr uint64_t P1 = 11400714785074694791ULL, P2 = 14029467366897019727ULL, P5 = 2870177450012600261ULL;
  uint64_t acc = P5;
  for (const uint64_t lane : {uint64_t(a), uint64_t(b)}) {
    acc += lane * P2;
    acc = (acc << 31) | (acc >> 33);
    acc *= P1;
  }
  acc += 2 ^ (P5 ^ 3527539ULL);
  return acc == ~uint64_t(0) ? 1546275796ULL : acc;
}

// _target_ratios: sorted(set(ratios), key=w*h). The sort is stable, so ratios with the same
// product keep the set's iteration order — and that order decides aspect-ratio ties between them
// (e.g. 1×2 vs 2×1 for a 5:4 image with min_tiles = max_tiles = 2). It is reproduced by replaying
// CPython's set insertion (setobject.c: open addressing, 9 linear probes, perturbed jumps,
// resize to 4·used when 5·fill ≥ 3·mask) over the comprehension's list.
std::vector<std::pair<int, int>> target_ratios(int min_tiles, int max_tiles) {
  struct Slot {
    bool used = false;
    uint64_t hash = 0;
    int w = 0, h = 0;
  };
  std::vector<Slot> table(8);
  size_t used = 0;
  auto insert_clean = [](std::vector<Slot>& t, const Slot& s) {
    const size_t mask = t.size() - 1;
    size_t perturb = s.hash, i = s.hash & mask;
    for (;;) {
      if (!t[i].used) return void(t[i] = s);
      if (i + 9 <= mask)
        for (size_t j = 1; j <= 9; ++j)
          if (!t[i + j].used) return void(t[i + j] = s);
      perturb >>= 5;
      i = (i * 5 + 1 + perturb) & mask;
    }
  };
  auto add = [&](int w, int h) {
    const uint64_t hash = py_tuple_hash(w, h);
    const size_t mask = table.size() - 1;
    size_t perturb = hash, i = hash & mask;
    for (;;) {
      const size_t probes = i + 9 <= mask ? 9 : 0;
      for (size_t k = 0; k <= probes; ++k) {
        Slot& s = table[i + k];
        if (!s.used) {
          s = Slot{true, hash, w, h};
          ++used;
          if (used * 5 >= mask * 3) {  // fill == used: nothing is ever deleted
            size_t size = 8;
            while (size <= used * 4) size <<= 1;
            std::vector<Slot> bigger(size);
            for (const Slot& o : table)
              if (o.used) insert_clean(bigger, o);
            table.swap(bigger);
          }
          return;
        }
        if (s.hash == hash && s.w == w && s.h == h) return;  // already there
      }
      perturb >>= 5;
      i = (i * 5 + 1 + perturb) & mask;
    }
  };
  for (int n = min_tiles; n <= max_tiles; ++n)
    for (int w = 1; w <= n; ++w)
      for (int h = 1; h <= n; ++h)
        if (min_tiles <= w * h && w * h <= max_tiles) add(w, h);
  std::vector<std::pair<int, int>> out;
  for (const Slot& s : table)
    if (s.used) out.emplace_back(s.w, s.h);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first * a.second < b.first * b.second; });
  return out;
}

// find_closest_aspect_ratio → (grid_width, grid_height).
std::pair<int, int> grid_layout(int64_t height, int64_t width, const ProcessorConfig& c, int min_tiles, int max_tiles) {
  const double aspect = double(width) / double(height);
  double best_diff = INFINITY;
  std::pair<int, int> best{1, 1};
  const int64_t area = width * height;
  for (const auto& [w, h] : target_ratios(min_tiles, max_tiles)) {
    const double diff = std::abs(aspect - double(w) / double(h));
    if (diff < best_diff) {
      best_diff = diff;
      best = {w, h};
    } else if (diff == best_diff) {
      const int64_t target_area = int64_t(c.tile_size) * c.tile_size * w * h;
      if (double(area) > 0.5 * double(target_area)) best = {w, h};
    }
  }
  return best;
}

// torchvision 0.14 resize of a uint8 [3][h][w] tensor: float32, antialiased bilinear, round half
// to even, back to uint8 (the same size returns the input untouched, as tvF.resize does).
std::vector<float> resize_levels(const std::vector<float>& planar, int h, int w, int out_h, int out_w) {
  if (h == out_h && w == out_w) return planar;
  std::vector<float> out(size_t(3) * out_h * out_w);
  resize_bilinear_antialias(planar.data(), 3, h, w, out.data(), out_h, out_w);
  for (float& v : out) v = std::clamp(std::nearbyint(v), 0.0f, 255.0f);
  return out;
}

// One tile of `levels` ([3][H][W] uint8 levels as floats): rows [y0, y0+th), cols [x0, x0+tw),
// rescaled/normalised and cut into patches.
ImageTile make_tile(const std::vector<float>& levels, int H, int W, int y0, int x0, int th, int tw,
                    const ProcessorConfig& c) {
  const int p = c.encoder_patch_size;
  ImageTile t;
  t.patches_h = th / p;
  t.patches_w = tw / p;
  t.patches.resize(size_t(t.patches_h) * t.patches_w * p * p * 3);
  // HF's fused step: mean and std are float32 tensors times 1/rescale_factor (a float32 multiply).
  float sub[3], div[3];
  const float inv_rescale = float(1.0 / c.rescale_factor);
  for (int ch = 0; ch < 3; ++ch) {
    sub[ch] = c.do_rescale ? c.image_mean[ch] * inv_rescale : c.image_mean[ch];
    div[ch] = c.do_rescale ? c.image_std[ch] * inv_rescale : c.image_std[ch];
  }
  const float rescale = float(c.rescale_factor);
  float* o = t.patches.data();
  for (int py = 0; py < t.patches_h; ++py)
    for (int px = 0; px < t.patches_w; ++px)
      for (int y = 0; y < p; ++y)
        for (int x = 0; x < p; ++x)
          for (int ch = 0; ch < 3; ++ch) {
            const float v = levels[(size_t(ch) * H + y0 + py * p + y) * W + x0 + px * p + x];
            *o++ = c.do_normalize ? (v - sub[ch]) / div[ch] : c.do_rescale ? v * rescale : v;
          }
  return t;
}

}  // namespace

ProcessorConfig ProcessorConfig::from_json(const nlohmann::json& root) {
  LFM_CHECK(root.is_object(), "image: processor config must be a JSON object");
  const nlohmann::json& j =
      root.contains("image_processor") && root["image_processor"].is_object() ? root["image_processor"] : root;
  ProcessorConfig c;
  c.downsample_factor = get_int(j, "downsample_factor", c.downsample_factor, 1, 16);
  c.encoder_patch_size = get_int(j, "encoder_patch_size", c.encoder_patch_size, 1, 1024);
  c.tile_size = get_int(j, "tile_size", c.tile_size, 1, 8192);
  // The grid search walks every w×h ≤ max_tiles for each n ≤ max_tiles (cubic): LFM2-VL uses 10.
  c.min_tiles = get_int(j, "min_tiles", c.min_tiles, 1, 64);
  c.max_tiles = get_int(j, "max_tiles", c.max_tiles, 1, 64);
  c.min_image_tokens = get_int(j, "min_image_tokens", c.min_image_tokens, 0, 1 << 20);
  c.max_image_tokens = get_int(j, "max_image_tokens", c.max_image_tokens, 1, 1 << 20);
  c.do_image_splitting = get_bool(j, "do_image_splitting", c.do_image_splitting);
  c.use_thumbnail = get_bool(j, "use_thumbnail", c.use_thumbnail);
  c.do_rescale = get_bool(j, "do_rescale", c.do_rescale);
  c.do_normalize = get_bool(j, "do_normalize", c.do_normalize);
  c.max_pixels_tolerance = get_positive(j, "max_pixels_tolerance", c.max_pixels_tolerance);
  c.rescale_factor = get_positive(j, "rescale_factor", c.rescale_factor);
  get_triple(j, "image_mean", c.image_mean, false);
  get_triple(j, "image_std", c.image_std, true);
  if (j.contains("resample") && !j["resample"].is_null()) {
    LFM_CHECK(j["resample"].is_number_integer() && j["resample"].get<int64_t>() == 2, "image: processor config 'resample' = ",
              j["resample"].dump(), " is not supported (only 2, bilinear, as LFM2-VL uses)");
  }
  LFM_CHECK(c.tile_size % c.encoder_patch_size == 0, "image: processor config tile_size ", c.tile_size,
            " is not a multiple of encoder_patch_size ", c.encoder_patch_size);
  LFM_CHECK(!c.do_image_splitting || c.min_tiles <= c.max_tiles, "image: processor config min_tiles ", c.min_tiles,
            " exceeds max_tiles ", c.max_tiles);
  // Keeps every pixel count in int64 and below 2^53 (exact in double, as in Python).
  LFM_CHECK(int64_t(c.max_image_tokens) * c.encoder_patch_size * c.encoder_patch_size * c.downsample_factor *
                    c.downsample_factor <= (int64_t(1) << 40),
            "image: processor config max_image_tokens ", c.max_image_tokens, " is too large for patch size ",
            c.encoder_patch_size, " and downsample factor ", c.downsample_factor);
  return c;
}

int ImageTile::tokens(int downsample_factor) const {
  const int f = downsample_factor;
  return ((patches_h + f - 1) / f) * ((patches_w + f - 1) / f);
}

PreprocessedImage preprocess(const Image& image, const ProcessorConfig& c) {
  const int H = image.height, W = image.width;
  LFM_CHECK(H >= 1 && W >= 1 && image.rgb.size() == size_t(H) * W * 3, "image: preprocess of a ", W, "x", H,
            " image with ", image.rgb.size(), " bytes of RGB");
  int min_tiles = c.min_tiles, max_tiles = c.max_tiles;
  if (!c.do_image_splitting) min_tiles = max_tiles = 1;
  const bool splitting = !(min_tiles == 1 && max_tiles == 1);

  // HWC uint8 → planar [3][H][W] levels (the processor's uint8 CHW tensor).
  std::vector<float> planar(size_t(3) * H * W);
  for (size_t i = 0; i < size_t(H) * W; ++i)
    for (int ch = 0; ch < 3; ++ch) planar[ch * size_t(H) * W + i] = image.rgb[3 * i + ch];

  PreprocessedImage out;
  const auto [new_h, new_w] = smart_resize(H, W, c);
  out.resized_height = int(new_h);
  out.resized_width = int(new_w);
  if (is_image_too_large(H, W, c) && splitting) {
    const auto [cols, rows] = grid_layout(H, W, c, min_tiles, max_tiles);
    const int T = c.tile_size, gh = T * rows, gw = T * cols;
    // 64 M pixels (LFM2-VL's largest grid, 10 tiles of 512², is 2.6 M): bounds what a config can ask.
    LFM_CHECK(int64_t(gh) * gw <= (int64_t(1) << 26), "image: tile grid ", cols, "x", rows, " of ", T,
              "-pixel tiles is too large");
    const std::vector<float> grid = resize_levels(planar, H, W, gh, gw);
    out.rows = rows;
    out.cols = cols;
    // A 1×1 grid (min_tiles = 1) is a tile_size tile, but the processor's text counts it as the
    // smart_resize image: transformers then fails on the mismatch, so refuse it here, clearly.
    if (rows * cols == 1) {
      const int f = c.downsample_factor, p = c.encoder_patch_size;
      const int64_t tile_tokens = int64_t((T / p + f - 1) / f) * ((T / p + f - 1) / f);
      const int64_t text_tokens = ((new_h / p + f - 1) / f) * ((new_w / p + f - 1) / f);
      LFM_CHECK(tile_tokens == text_tokens, "image: a 1x1 tile grid (min_tiles = 1) gives ", tile_tokens,
                " image features where the processor's prompt counts ", text_tokens,
                " tokens (transformers fails on this too); use min_tiles >= 2");
    }
    for (int r = 0; r < rows; ++r)
      for (int col = 0; col < cols; ++col) out.tiles.push_back(make_tile(grid, gh, gw, r * T, col * T, T, T, c));
    if (c.use_thumbnail && rows * cols != 1) {
      const std::vector<float> thumb = resize_levels(planar, H, W, int(new_h), int(new_w));
      out.tiles.push_back(make_tile(thumb, int(new_h), int(new_w), 0, 0, int(new_h), int(new_w), c));
      out.thumbnail = true;
    }
  } else {
    const std::vector<float> single = resize_levels(planar, H, W, int(new_h), int(new_w));
    out.tiles.push_back(make_tile(single, int(new_h), int(new_w), 0, 0, int(new_h), int(new_w), c));
  }
  return out;
}

PreprocessMemory preprocess_memory(int64_t W, int64_t H, const ProcessorConfig& c) {
  constexpr int64_t kF = sizeof(float);
  int min_tiles = c.min_tiles, max_tiles = c.max_tiles;
  if (!c.do_image_splitting) min_tiles = max_tiles = 1;
  const bool splitting = !(min_tiles == 1 && max_tiles == 1);
  const int64_t planar = 3 * kF * W * H;
  const auto [new_h, new_w] = smart_resize(H, W, c);
  // resize_levels to out_h x out_w: its width pass ([3][H][out_w]) and its result; the same size
  // is a copy.
  auto resize_peak = [&](int64_t out_h, int64_t out_w) {
    const int64_t out = 3 * kF * out_h * out_w;
    return out_h == H && out_w == W ? out : 3 * kF * H * out_w + out;
  };
  const int64_t thumb = 3 * kF * new_h * new_w;
  PreprocessMemory m;
  if (is_image_too_large(H, W, c) && splitting) {
    const auto [cols, rows] = grid_layout(H, W, c, min_tiles, max_tiles);
    const int64_t grid = 3 * kF * int64_t(c.tile_size) * rows * c.tile_size * cols;
    const bool with_thumb = c.use_thumbnail && rows * cols != 1;
    m.tiles = grid + (with_thumb ? thumb : 0);
    // The grid's resize; then the grid, its tiles and the thumbnail's resize and tile together.
    m.working = planar + std::max(resize_peak(int64_t(c.tile_size) * rows, int64_t(c.tile_size) * cols),
                                  grid + (with_thumb ? resize_peak(new_h, new_w) : 0));
  } else {
    m.tiles = thumb;
    m.working = planar + resize_peak(new_h, new_w);
  }
  return m;
}

ImageMarkerIds resolve_image_markers(const std::function<std::optional<int32_t>(std::string_view)>& id_of) {
  ImageMarkerIds ids;
  auto get = [&](const std::string& name) { return id_of(name).value_or(-1); };
  ids.image_token = get("<image>");
  LFM_CHECK(ids.image_token >= 0, "image: the tokenizer has no '<image>' token (not an LFM2-VL tokenizer?)");
  ids.image_start = get("<|image_start|>");
  ids.image_end = get("<|image_end|>");
  ids.thumbnail = get("<|img_thumbnail|>");
  ids.row_col.assign(size_t(ids.max_grid) * ids.max_grid, -1);
  for (int r = 1; r <= ids.max_grid; ++r)
    for (int col = 1; col <= ids.max_grid; ++col)
      ids.row_col[(r - 1) * ids.max_grid + (col - 1)] = get(cat("<|img_row_", r, "_col_", col, "|>"));
  return ids;
}

std::vector<int32_t> image_token_layout(const PreprocessedImage& img, const ImageMarkerIds& ids, int downsample_factor) {
  const int f = downsample_factor;
  LFM_CHECK(f >= 1 && !img.tiles.empty() && ids.image_token >= 0, "image: token layout of an empty image");
  auto need = [](int32_t id, const std::string& name) {
    LFM_CHECK(id >= 0, "image: the tokenizer has no '", name, "' token, which the image layout needs");
    return id;
  };
  // The processor counts a grid tile's tokens from tile_size and the single tile's / thumbnail's from
  // smart_resize's size; both equal the tiles' own counts (preprocess refuses the one case where
  // they would not).
  const ImageTile& last = img.tiles.back();
  std::vector<int32_t> out;
  out.push_back(need(ids.image_start, "<|image_start|>"));
  int expected = 0, placed = 0;
  for (const ImageTile& t : img.tiles) expected += t.tokens(f);
  if (img.rows > 1 || img.cols > 1) {
    LFM_CHECK(img.rows <= ids.max_grid && img.cols <= ids.max_grid, "image: a ", img.cols, "x", img.rows,
              " tile grid has no row/column tokens (at most ", ids.max_grid, "x", ids.max_grid, ")");
    const int per_tile = img.tiles.front().tokens(f);
    for (int r = 1; r <= img.rows; ++r)
      for (int col = 1; col <= img.cols; ++col) {
        out.push_back(need(ids.row_col[(r - 1) * ids.max_grid + (col - 1)], cat("<|img_row_", r, "_col_", col, "|>")));
        out.insert(out.end(), size_t(per_tile), ids.image_token);
        placed += per_tile;
      }
    if (img.thumbnail) {
      out.push_back(need(ids.thumbnail, "<|img_thumbnail|>"));
      out.insert(out.end(), size_t(last.tokens(f)), ids.image_token);
      placed += last.tokens(f);
    }
  } else {
    out.insert(out.end(), size_t(last.tokens(f)), ids.image_token);
    placed += last.tokens(f);
  }
  out.push_back(need(ids.image_end, "<|image_end|>"));
  LFM_CHECK(placed == expected, "image: layout places ", placed, " image tokens for ", expected, " features");
  return out;
}

}  // namespace lfm::image

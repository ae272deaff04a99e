// safetensors reader: mmap the file, validate every rule of the format before handing out any view.
#include "moxi/formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include "moxi/base/error.h"
#include "moxi/formats/safetensors-json.h"

namespace moxi::formats {

namespace detail {

namespace {

using json = nlohmann::json;

// Builds the document from nlohmann's SAX events, checking duplicate keys (against the object being
// built, O(log n) per key) and depth as it goes. In streaming mode each member of a top-level object is
// handed out when complete instead of being kept.
class strict_sax {
 public:
  strict_sax(const std::string& what, int max_depth, const member_fn* on_member)
      : what_(what), max_depth_(max_depth), on_member_(on_member) {}

  bool null() { return value(json(nullptr)); }
  bool boolean(bool b) { return value(json(b)); }
  bool number_integer(json::number_integer_t v) { return value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return value(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return value(json(v)); }
  bool string(std::string& s) { return value(json(std::move(s))); }
  bool binary(json::binary_t& b) { return value(json(std::move(b))); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& k) {
    frame& top = frames_.back();
    const bool dup = streaming_top() ? !top_keys_.insert(k).second : top.node->contains(k);
    if (dup) {
      const std::string in = where();
      // At the top level of a safetensors header the keys are tensor names.
      throw error(what_ + ": duplicate key '" + k + "'" + (in.empty() ? "" : " in '" + in + "'"));
    }
    top.key = std::move(k);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    throw error(what_ + ": not valid JSON: " + e.what());
  }

  json& root() { return root_; }

 private:
  struct frame {
    json* node;       // the open object or array
    std::string key;  // an object's current key
  };

  // Streaming, and the innermost open container is the top-level object.
  bool streaming_top() const {
    return on_member_ && frames_.size() == 1 && frames_[0].node == &root_ && root_.is_object();
  }

  // Keys leading to the innermost open container.
  std::string where() const {
    std::string path;
    for (size_t i = 0; i + 1 < frames_.size(); ++i)
      if (frames_[i].node->is_object() && !frames_[i].key.empty())
        path += (path.empty() ? "" : ".") + frames_[i].key;
    return path;
  }

  json* place(json&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    if (streaming_top()) {
      member_ = std::move(v);
      return &member_;
    }
    json& top = *frames_.back().node;
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[frames_.back().key];
    slot = std::move(v);
    return &slot;
  }

  void hand_out() {
    (*on_member_)(frames_[0].key, member_);
    member_ = json();
  }

  bool value(json&& v) {
    const bool member = streaming_top();
    place(std::move(v));
    if (member) hand_out();
    return true;
  }

  bool open(json&& v) {
    if (static_cast<int>(frames_.size()) >= max_depth_)
      throw error(what_ + ": JSON nested deeper than " + std::to_string(max_depth_) + " levels");
    json* node = place(std::move(v));
    frames_.push_back({node, {}});
    return true;
  }

  bool close() {
    frames_.pop_back();
    if (streaming_top()) hand_out();
    return true;
  }

  const std::string& what_;
  int max_depth_;
  const member_fn* on_member_;
  json root_;
  json member_;  // streaming: the top-level member being built
  std::vector<frame> frames_;
  std::set<std::string> top_keys_;  // streaming: the top-level keys seen
};

json parse_strict(std::string_view text, const std::string& what, int max_depth, const member_fn* on_member) {
  // nlohmann stops at a NUL byte as if the input ended there, which would accept "{}\0<anything>". JSON never
  // holds a raw NUL (control characters in strings must be escaped), so reject it outright.
  if (auto nul = text.find('\0'); nul != std::string_view::npos)
    throw error(what + ": NUL byte at header offset " + std::to_string(nul) + " (not valid JSON)");
  strict_sax sax(what, max_depth, on_member);
  try {
    json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json, /*strict=*/true,
                    /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    throw error(what + ": not valid JSON: " + e.what());
  }
  return std::move(sax.root());
}

}  // namespace

nlohmann::json parse_json_strict(std::string_view text, const std::string& what, int max_depth) {
  return parse_strict(text, what, max_depth, nullptr);
}

nlohmann::json parse_json_strict_members(std::string_view text, const std::string& what, int max_depth,
                                         const member_fn& on_member) {
  return parse_strict(text, what, max_depth, &on_member);
}

}  // namespace detail

namespace {

constexpr std::array<std::string_view, 9> kKnownUnsupported = {
    "F4", "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "U16", "U32", "U64", "C64"};

std::string supported_dtype_list() {
  std::string out;
  for (int i = 0; i <= static_cast<int>(dtype::BOOL); ++i) {
    if (!out.empty()) out += ", ";
    out += dtype_name(static_cast<dtype>(i));
  }
  return out;
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

struct fd_closer {
  int fd;
  ~fd_closer() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::unique_ptr<safetensors_file> safetensors_file::open(const std::string& path) {
  std::unique_ptr<safetensors_file> f(new safetensors_file());
  f->path_ = path;
  const std::string what = "safetensors '" + path + "'";

  fd_closer fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) throw io_error("open safetensors file", path, errno);
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) throw io_error("stat safetensors file", path, errno);
  if (!S_ISREG(st.st_mode)) throw error(what + ": not a regular file");
  f->file_size_ = static_cast<uint64_t>(st.st_size);
  if (f->file_size_ < 8)
    throw error(what + ": not a safetensors file (" + std::to_string(f->file_size_) +
                " bytes, shorter than the 8-byte header size)");

  void* map = ::mmap(nullptr, f->file_size_, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (map == MAP_FAILED) throw io_error("mmap safetensors file", path, errno);
  f->base_ = static_cast<const std::byte*>(map);
  f->parse_header();  // on throw, the unique_ptr's destructor unmaps
  return f;
}

void safetensors_file::release_pages() const {
  if (base_) ::madvise(const_cast<std::byte*>(base_), file_size_, MADV_DONTNEED);
}

safetensors_file::~safetensors_file() {
  if (base_) ::munmap(const_cast<std::byte*>(base_), file_size_);
}

void safetensors_file::parse_header() {
  const std::string what = "safetensors '" + path_ + "'";
  auto fail = [&what](const std::string& msg) -> error { return error(what + ": " + msg); };

  const uint64_t header_len = read_le64(base_);
  // A safetensors header is a JSON object right after the length field (the reference reader in
  // huggingface/safetensors requires '{' as the first byte, InvalidHeaderStart; moxi also allows JSON
  // whitespace before it). Anything else is some other file: say so, instead of quoting a "header length"
  // read from text bytes.
  const uint64_t scan = std::min<uint64_t>(header_len, kMaxHeaderSize);
  size_t first = 8;
  while (first < file_size_ && first - 8 < scan &&
         (base_[first] == std::byte{' '} || base_[first] == std::byte{'\t'} ||
          base_[first] == std::byte{'\n'} || base_[first] == std::byte{'\r'}))
    ++first;
  if (first >= file_size_ || first - 8 >= scan || base_[first] != std::byte{'{'})
    throw fail("not a safetensors file (no JSON header object after the 8-byte length field)");
  // A length beyond both the file and the format's limit is not a header length at all (text read as a
  // number is above 2^56): some other file that happens to have a '{' at offset 8.
  if (header_len > kMaxHeaderSize && header_len > file_size_ - 8)
    throw fail("not a safetensors file (its first 8 bytes, read as the header size, do not fit the file's " +
               std::to_string(file_size_) + " bytes)");
  if (header_len > kMaxHeaderSize)
    throw fail("header length " + std::to_string(header_len) + " exceeds the limit of " +
               std::to_string(kMaxHeaderSize) + " bytes");
  if (header_len > file_size_ - 8)
    throw fail("header length " + std::to_string(header_len) + " runs past the end of the file (" +
               std::to_string(file_size_) + " bytes, so at most " + std::to_string(file_size_ - 8) + ")");
  data_offset_ = 8 + header_len;

  const std::string_view text(reinterpret_cast<const char*>(base_ + 8), header_len);
  // Tensor entries are two levels deep (name -> {shape: [..]}), so 8 leaves room and bounds hostile input.
  // Each entry is checked and turned into a tensor_entry as soon as the parser has it, so no document of
  // the whole header is ever held (a 500k-tensor header would take gigabytes as a DOM).
  nlohmann::json header = detail::parse_json_strict_members(
      text, what + " header", 8,
      [this, &what](const std::string& name, nlohmann::json& value) { add_entry(name, value, what); });
  if (!header.is_object()) throw fail(std::string("header must be a JSON object, got ") + header.type_name());
  finish_header();
}

void safetensors_file::add_entry(const std::string& name, const nlohmann::json& value,
                                 const std::string& what) {
  auto fail = [&what](const std::string& msg) -> error { return error(what + ": " + msg); };
  if (name == "__metadata__") {
    if (!value.is_object())
      throw fail(std::string("__metadata__ must be an object of string values, got ") + value.type_name());
    for (auto& [key, v] : value.items()) {
      if (!v.is_string()) throw fail("__metadata__ key '" + key + "' must be a string, got " + v.type_name());
      metadata_.emplace(key, v.get<std::string>());
    }
    return;
  }
  auto tfail = [&](const std::string& msg) { return fail("tensor '" + name + "': " + msg); };
  if (!value.is_object())
    throw tfail(std::string("entry must be an object with dtype, shape and data_offsets, got ") +
                value.type_name());
  for (auto& [key, v] : value.items()) {
    (void)v;
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      throw tfail("unexpected key '" + key + "' (expected only dtype, shape, data_offsets)");
  }
  tensor_entry e;
  e.name = name;

  auto dt = value.find("dtype");
  if (dt == value.end()) throw tfail("missing dtype");
  if (!dt->is_string()) throw tfail(std::string("dtype must be a string, got ") + dt->type_name());
  const auto& dname = dt->get_ref<const std::string&>();
  auto parsed = dtype_from_name(dname);
  if (!parsed) {
    bool known =
        std::find(kKnownUnsupported.begin(), kKnownUnsupported.end(), dname) != kKnownUnsupported.end();
    throw tfail("dtype '" + dname + "' is " +
                (known ? "a safetensors dtype moxi does not support" : "not a known safetensors dtype") +
                " (supported: " + supported_dtype_list() + ")");
  }
  e.type = *parsed;

  auto sh = value.find("shape");
  if (sh == value.end()) throw tfail("missing shape");
  if (!sh->is_array()) throw tfail(std::string("shape must be an array, got ") + sh->type_name());
  bool has_zero = false;
  for (const auto& d : *sh) {
    // Negative integers parse as number_integer and out-of-range ones as floats: both are rejected here.
    if (!d.is_number_unsigned() ||
        d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw tfail("shape " + sh->dump() + " must hold non-negative integers below 2^63");
    e.shape.push_back(static_cast<int64_t>(d.get<uint64_t>()));
    has_zero |= e.shape.back() == 0;
  }
  // A zero dimension makes the tensor empty whatever the others are, so check overflow only without one.
  uint64_t nbytes = 0;
  if (!has_zero) {
    uint64_t numel = 1;
    for (int64_t d : e.shape)
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(d), &numel))
        throw tfail("shape " + sh->dump() + " has more elements than fit in 64 bits");
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.type)), &nbytes) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw tfail("shape " + sh->dump() + " x " + dname + " is more bytes than fit in 64 bits");
  }

  auto off = value.find("data_offsets");
  if (off == value.end()) throw tfail("missing data_offsets");
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    throw tfail("data_offsets " + off->dump() + " must be [begin, end], two non-negative integers");
  e.begin = (*off)[0].get<uint64_t>();
  e.end = (*off)[1].get<uint64_t>();
  if (e.begin > e.end)
    throw tfail("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                "] has begin after end");
  if (e.end - e.begin != nbytes)
    throw tfail("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "] span " +
                std::to_string(e.end - e.begin) + " bytes, expected " + std::to_string(nbytes) + " for " +
                dname + " " + sh->dump());
  tensors_.push_back(std::move(e));
}

void safetensors_file::finish_header() {
  const std::string what = "safetensors '" + path_ + "'";
  auto fail = [&what](const std::string& msg) -> error { return error(what + ": " + msg); };
  const uint64_t data_size = file_size_ - data_offset_;

  // Sorted by (begin, end), a valid file's tensors tile [0, data_size) exactly; zero-byte tensors sort
  // before a non-empty one at the same offset, so they never look like overlaps.
  std::sort(tensors_.begin(), tensors_.end(), [](const tensor_entry& a, const tensor_entry& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t expected = 0;
  const tensor_entry* prev = nullptr;
  for (const auto& e : tensors_) {
    std::string after = prev ? "tensor '" + prev->name + "' ends" : "the data section starts";
    if (e.begin < expected)
      throw fail("tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " +
                 std::to_string(e.end) + "] overlap tensor '" + prev->name + "' (which ends at " +
                 std::to_string(expected) + ")");
    if (e.begin > expected)
      throw fail("tensor '" + e.name + "' begins at " + std::to_string(e.begin) + " but " + after + " at " +
                 std::to_string(expected) + ": a hole of " + std::to_string(e.begin - expected) +
                 " bytes (tensors must be contiguous)");
    if (e.end > data_size)
      throw fail("tensor '" + e.name + "' data_offsets [" + std::to_string(e.begin) + ", " +
                 std::to_string(e.end) + "] run past the end of the data section (" +
                 std::to_string(data_size) + " bytes; is the file truncated?)");
    expected = e.end;
    prev = &e;
  }
  if (expected != data_size)
    throw fail("data section is " + std::to_string(data_size) + " bytes but the tensors cover only " +
               std::to_string(expected) + (prev ? " (last tensor '" + prev->name + "')" : std::string()) +
               ": the last tensor must end exactly at end of file");

  for (size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

const tensor_entry* safetensors_file::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

tensor_view safetensors_file::view(const tensor_entry& entry) const {
  // Only entries validated by parse_header are in bounds; a foreign entry is a programming error.
  MOXI_ASSERT(entry.begin <= entry.end && entry.end <= file_size_ - data_offset_,
              "tensor_entry outside this safetensors file");
  return tensor_view{entry.type, entry.shape, base_ + data_offset_ + entry.begin,
                     static_cast<size_t>(entry.end - entry.begin)};
}

std::string encode_safetensors_header(const std::vector<tensor_entry>& entries,
                                      const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (const auto& e : entries) {
    MOXI_ASSERT(e.name != "__metadata__", "tensor named __metadata__");
    header[e.name] = {{"dtype", dtype_name(e.type)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw error(std::string("safetensors header: a tensor name or metadata string is not valid UTF-8: ") +
                e.what());
  }
  // Pad so that 8 + header length is a multiple of 8: the data section (and, with the writers' ordering,
  // every tensor) is then naturally aligned in an mmap.
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

}  // namespace moxi::formats

#include "wantrain/io/pth_index.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>

#include "wantrain/util/error.hpp"

namespace wt::io {
namespace {

constexpr uint64_t kMaxPickleBytes = 256ull << 20;  // a state dict's pickle is kilobytes to a few MiB
constexpr uint64_t kMaxEntries = 1u << 20;
constexpr size_t kMaxStack = 1u << 20;
constexpr size_t kMaxDims = 16;
constexpr size_t kMaxValues = 1u << 20;  // some 300 MB of values at most; a 50000-tensor state dict needs less

[[noreturn]] void refuse(const std::string& path, const std::string& what) {
  throw UsageError(fmt::format("{}: {}", path, what));
}

uint64_t le(const std::string& bytes, size_t at, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = value << 8 | uint64_t(uint8_t(bytes[at + size_t(i)]));
  return value;
}

// ---- the zip container -----------------------------------------------------

struct ZipEntry {
  uint64_t data_offset = 0, size = 0;
};

class Zip {
 public:
  Zip(const std::string& path, uint64_t file_size, const ByteReader& read)
      : path_(path), size_(file_size), read_(read) {
    if (file_size < 22) refuse(path, "not a torch.save file (too short for a zip archive)");
    const uint64_t tail_size = std::min<uint64_t>(file_size, 22 + 65535);
    const std::string tail = read_(file_size - tail_size, tail_size);
    size_t eocd = std::string::npos;
    for (size_t i = tail.size() - 22 + 1; i-- > 0;)
      if (tail.compare(i, 4, "PK\x05\x06") == 0) {
        eocd = i;
        break;
      }
    if (eocd == std::string::npos)
      refuse(path,
             "not a torch.save file (no zip directory; a .pth from torch.save before PyTorch 1.6, or "
             "another format)");
    uint64_t count = le(tail, eocd + 10, 2), cd_size = le(tail, eocd + 12, 4), cd_offset = le(tail, eocd + 16, 4);
    if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_offset == 0xFFFFFFFF) {  // ZIP64
      const uint64_t eocd_at = file_size - tail_size + eocd;
      if (eocd_at < 20) refuse(path, "a ZIP64 archive without its locator");
      const std::string locator = read_(eocd_at - 20, 20);
      if (locator.compare(0, 4, "PK\x06\x07") != 0) refuse(path, "a ZIP64 archive without its locator");
      const uint64_t record_at = le(locator, 8, 8);
      check_range(record_at, 56, "the ZIP64 directory record");
      const std::string record = read_(record_at, 56);
      if (record.compare(0, 4, "PK\x06\x06") != 0) refuse(path, "a broken ZIP64 directory record");
      count = le(record, 32, 8);
      cd_size = le(record, 40, 8);
      cd_offset = le(record, 48, 8);
    }
    if (count > kMaxEntries || cd_size > kMaxPickleBytes)
      refuse(path, fmt::format("a zip directory of {} entries in {} bytes; a torch.save file's is far smaller", count,
                               cd_size));
    check_range(cd_offset, cd_size, "the zip directory");
    const std::string cd = read_(cd_offset, cd_size);
    size_t at = 0;
    for (uint64_t i = 0; i < count; ++i) {
      if (at + 46 > cd.size() || cd.compare(at, 4, "PK\x01\x02") != 0) refuse(path, "a broken zip directory");
      const uint64_t method = le(cd, at + 10, 2), name_len = le(cd, at + 28, 2), extra_len = le(cd, at + 30, 2),
                     comment_len = le(cd, at + 32, 2);
      uint64_t compressed = le(cd, at + 20, 4), size = le(cd, at + 24, 4), local = le(cd, at + 42, 4);
      if (at + 46 + name_len + extra_len + comment_len > cd.size()) refuse(path, "a broken zip directory");
      const std::string name = cd.substr(at + 46, name_len);
      // ZIP64 sizes and offset, in this order, for each field that says 0xFFFFFFFF.
      for (size_t e = at + 46 + name_len; e + 4 <= at + 46 + name_len + extra_len;) {
        const uint64_t id = le(cd, e, 2), len = le(cd, e + 2, 2);
        if (e + 4 + len > at + 46 + name_len + extra_len) refuse(path, "a broken zip directory");
        if (id == 1) {
          size_t f = e + 4;
          for (uint64_t* field : {&size, &compressed, &local})
            if (*field == 0xFFFFFFFF) {
              if (f + 8 > e + 4 + len) refuse(path, "a broken ZIP64 field in the zip directory");
              *field = le(cd, f, 8);
              f += 8;
            }
        }
        e += 4 + len;
      }
      if (method != 0 || compressed != size)
        refuse(path, fmt::format("zip entry {} is compressed; torch.save stores its entries", name));
      check_range(local, 30, "a zip entry's header");
      const std::string header = read_(local, 30);
      if (header.compare(0, 4, "PK\x03\x04") != 0) refuse(path, fmt::format("zip entry {} has no header", name));
      const uint64_t data = local + 30 + le(header, 26, 2) + le(header, 28, 2);
      check_range(data, size, fmt::format("zip entry {}", name));
      entries_[name] = {data, size};
      at += 46 + name_len + extra_len + comment_len;
    }
  }

  const ZipEntry* find(const std::string& name) const {
    const auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  // The entry "<archive>/data.pkl" (one archive folder, whatever its name).
  std::string pickle_name() const {
    std::string found;
    for (const auto& [name, entry] : entries_) {
      const auto slash = name.find('/');
      if (slash != std::string::npos && slash > 0 && name.substr(slash) == "/data.pkl") {
        if (!found.empty()) refuse(path_, "two pickles in one torch.save file");
        found = name;
      }
    }
    if (found.empty()) refuse(path_, "not a torch.save file (a zip without data.pkl)");
    return found;
  }
  std::string read(const ZipEntry& entry) const { return read_(entry.data_offset, entry.size); }

 private:
  void check_range(uint64_t offset, uint64_t size, const std::string& what) const {
    if (offset > size_ || size > size_ - offset)
      refuse(path_,
             fmt::format("{} lies outside the file ({} bytes at {} of {}; truncated?)", what, size, offset, size_));
  }

  std::string path_;
  uint64_t size_;
  const ByteReader& read_;
  std::map<std::string, ZipEntry> entries_;
};

// ---- the pickle subset -----------------------------------------------------

struct Value;
using ValuePtr = std::shared_ptr<Value>;

enum class Callable { OrderedDict, RebuildTensor, RebuildParameter };

struct Storage {
  PthDtype dtype = PthDtype::F32;
  std::string key;
  int64_t numel = 0;
};

struct Value {
  enum class Kind { None, Bool, Int, Float, String, Tuple, List, Dict, Callable, StorageType, Storage, Tensor } kind;
  int64_t integer = 0;
  double real = 0;
  std::string text;
  std::vector<ValuePtr> items;  // tuple and list; dict: key, value, key, value, ...
  Callable callable = Callable::OrderedDict;
  PthDtype dtype = PthDtype::F32;  // StorageType
  Storage storage;
  PthTensor tensor;
};

std::optional<PthDtype> storage_dtype(const std::string& name) {
  static const std::map<std::string, PthDtype> types = {
      {"FloatStorage", PthDtype::F32},     {"DoubleStorage", PthDtype::F64}, {"HalfStorage", PthDtype::F16},
      {"BFloat16Storage", PthDtype::BF16}, {"LongStorage", PthDtype::I64},   {"IntStorage", PthDtype::I32},
      {"ShortStorage", PthDtype::I16},     {"CharStorage", PthDtype::I8},    {"ByteStorage", PthDtype::U8},
      {"BoolStorage", PthDtype::Bool}};
  const auto it = types.find(name);
  if (it == types.end()) return std::nullopt;
  return it->second;
}

class Unpickler {
 public:
  Unpickler(const std::string& path, const std::string& bytes) : path_(path), in_(bytes) {}
  // Values may nest, or refer to each other in cycles (memo), as deep as a
  // file makes them: their links are cut one by one here, so that freeing
  // them never recurses and a cycle never leaks.
  ~Unpickler() {
    for (const auto& value : made_) value->items.clear();
  }
  Unpickler(const Unpickler&) = delete;
  Unpickler& operator=(const Unpickler&) = delete;

  ValuePtr run() {
    while (true) {
      const uint8_t op = byte();
      switch (op) {
        case 0x80: byte(); break;      // PROTO
        case 0x95: bytes(8); break;    // FRAME (protocol 4): a length hint
        case '.': return pop("STOP");  // STOP
        case '(': marks_.push_back(stack_.size()); break;
        case 'N': push(make(Value::Kind::None)); break;
        case 0x88: push(boolean(true)); break;
        case 0x89: push(boolean(false)); break;
        case 'K': push(integer(int64_t(le(bytes(1), 0, 1)))); break;
        case 'M': push(integer(int64_t(le(bytes(2), 0, 2)))); break;
        case 'J': push(integer(int64_t(int32_t(uint32_t(le(bytes(4), 0, 4)))))); break;
        case 0x8a: push(integer(long1())); break;
        case 'G': push(real()); break;
        case 'X': push(string(le(bytes(4), 0, 4))); break;
        case 0x8c: push(string(le(bytes(1), 0, 1))); break;
        case 0x8d: push(string(le(bytes(8), 0, 8))); break;
        case ')': push(make(Value::Kind::Tuple)); break;
        case 't': push(sequence(Value::Kind::Tuple, take_marked())); break;
        case 0x85: push(sequence(Value::Kind::Tuple, take(1))); break;
        case 0x86: push(sequence(Value::Kind::Tuple, take(2))); break;
        case 0x87: push(sequence(Value::Kind::Tuple, take(3))); break;
        case ']': push(make(Value::Kind::List)); break;
        case 'a': {
          auto item = take(1);
          append(top("APPEND", 0), std::move(item));
          break;
        }
        case 'e': {
          auto items = take_marked();
          append(top("APPENDS", 0), std::move(items));
          break;
        }
        case '}': push(make(Value::Kind::Dict)); break;
        case 's': set_items(take(2)); break;
        case 'u': set_items(take_marked()); break;
        case 'c': {
          std::string module = line(), name = line();
          push(global(module, name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto parts = take(2);
          if (parts[0]->kind != Value::Kind::String || parts[1]->kind != Value::Kind::String) bad("STACK_GLOBAL");
          push(global(parts[0]->text, parts[1]->text));
          break;
        }
        case 'q': memo_put(le(bytes(1), 0, 1)); break;
        case 'r': memo_put(le(bytes(4), 0, 4)); break;
        case 0x94: memo_put(memo_.size()); break;  // MEMOIZE
        case 'h': push(memo_get(le(bytes(1), 0, 1))); break;
        case 'j': push(memo_get(le(bytes(4), 0, 4))); break;
        case 'Q': push(persistent(pop("BINPERSID"))); break;
        case 'R': {
          auto args = pop("REDUCE"), callable = pop("REDUCE");
          push(reduce(callable, args));
          break;
        }
        case 'b': {
          auto state = pop("BUILD");
          // An OrderedDict's attributes (a state_dict's `_metadata`): not needed.
          if (top("BUILD", 0)->kind != Value::Kind::Dict || state->kind != Value::Kind::Dict) bad("BUILD");
          break;
        }
        default:
          refuse(path_, fmt::format("data.pkl uses pickle opcode 0x{:02x} at byte {}, which a state dict of tensors "
                                    "does not need; refused (a .pth is a pickle: wantrain runs no code from it)",
                                    op, pos_ - 1));
      }
      if (stack_.size() > kMaxStack) refuse(path_, "data.pkl nests too deeply");
    }
  }

 private:
  [[noreturn]] void bad(const char* op) {
    refuse(path_, fmt::format("data.pkl is not a state dict of tensors ({} at byte {})", op, pos_));
  }
  uint8_t byte() { return uint8_t(bytes(1)[0]); }
  std::string bytes(uint64_t n) {
    if (n > in_.size() - pos_) refuse(path_, "data.pkl ends early (truncated?)");
    std::string out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  std::string line() {
    const auto end = in_.find('\n', pos_);
    if (end == std::string::npos || end - pos_ > 256) refuse(path_, "data.pkl ends early (truncated?)");
    std::string out = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return out;
  }
  int64_t long1() {
    const uint64_t n = byte();
    if (n > 8) refuse(path_, "data.pkl holds an integer wider than 64 bits");
    const std::string b = bytes(n);
    if (n == 0) return 0;
    uint64_t value = le(b, 0, int(n));
    if (n < 8 && (uint8_t(b[n - 1]) & 0x80)) value |= ~uint64_t(0) << (8 * n);  // sign-extend
    return int64_t(value);
  }
  ValuePtr boolean(bool b) {
    auto v = make(Value::Kind::Bool);
    v->integer = b;
    return v;
  }
  ValuePtr integer(int64_t i) {
    auto v = make(Value::Kind::Int);
    v->integer = i;
    return v;
  }
  ValuePtr real() {
    const std::string b = bytes(8);
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = bits << 8 | uint8_t(b[size_t(i)]);  // big-endian
    auto v = make(Value::Kind::Float);
    std::memcpy(&v->real, &bits, 8);
    return v;
  }
  ValuePtr string(uint64_t n) {
    auto v = make(Value::Kind::String);
    v->text = bytes(n);
    return v;
  }
  ValuePtr sequence(Value::Kind kind, std::vector<ValuePtr> items) {
    auto v = make(kind);
    v->items = std::move(items);
    return v;
  }
  void push(ValuePtr v) { stack_.push_back(std::move(v)); }
  ValuePtr pop(const char* op) {
    if (stack_.size() <= (marks_.empty() ? 0 : marks_.back())) bad(op);
    auto v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  ValuePtr top(const char* op, size_t below) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + below + 1) bad(op);
    return stack_[stack_.size() - 1 - below];
  }
  std::vector<ValuePtr> take(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) bad("a tuple or item");
    std::vector<ValuePtr> out(stack_.end() - std::ptrdiff_t(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<ValuePtr> take_marked() {
    if (marks_.empty()) bad("MARK");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<ValuePtr> out(stack_.begin() + std::ptrdiff_t(mark), stack_.end());
    stack_.resize(mark);
    return out;
  }
  void append(const ValuePtr& list, std::vector<ValuePtr> items) {
    if (list->kind != Value::Kind::List) bad("APPEND");
    for (auto& item : items) list->items.push_back(std::move(item));
  }
  void set_items(std::vector<ValuePtr> items) {
    if (items.size() % 2) bad("SETITEMS");
    auto dict = top("SETITEMS", 0);
    if (dict->kind != Value::Kind::Dict) bad("SETITEMS");
    for (auto& item : items) dict->items.push_back(std::move(item));
  }
  void memo_put(uint64_t index) {
    if (stack_.empty()) bad("PUT");
    if (index > kMaxStack) refuse(path_, "data.pkl's memo is too large");
    memo_[index] = stack_.back();
  }
  ValuePtr memo_get(uint64_t index) {
    const auto it = memo_.find(index);
    if (it == memo_.end()) bad("GET");
    return it->second;
  }
  ValuePtr global(const std::string& module, const std::string& name) {
    auto v = make(Value::Kind::Callable);
    if (module == "collections" && name == "OrderedDict") {
      v->callable = Callable::OrderedDict;
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      v->callable = Callable::RebuildTensor;
    } else if (module == "torch._utils" && name == "_rebuild_parameter") {
      v->callable = Callable::RebuildParameter;
    } else if (const auto dtype = module == "torch" ? storage_dtype(name) : std::nullopt) {
      v->kind = Value::Kind::StorageType;
      v->dtype = *dtype;
    } else {
      refuse(path_, fmt::format("data.pkl asks for {}.{}, which a state dict of tensors does not need; refused (a "
                                ".pth is a pickle: wantrain runs no code from it)",
                                module, name));
    }
    return v;
  }
  // ('storage', torch.FloatStorage, key, location, numel)
  ValuePtr persistent(const ValuePtr& id) {
    const auto& t = id->items;
    if (id->kind != Value::Kind::Tuple || t.size() != 5 || t[0]->kind != Value::Kind::String ||
        t[0]->text != "storage" || t[1]->kind != Value::Kind::StorageType || t[2]->kind != Value::Kind::String ||
        t[4]->kind != Value::Kind::Int || t[4]->integer < 0)
      bad("BINPERSID");
    auto v = make(Value::Kind::Storage);
    v->storage = {t[1]->dtype, t[2]->text, t[4]->integer};
    return v;
  }
  std::vector<int64_t> sizes(const ValuePtr& tuple, const char* what) {
    if (tuple->kind != Value::Kind::Tuple || tuple->items.size() > kMaxDims)
      refuse(path_, fmt::format("data.pkl: a tensor's {} is not a tuple of up to {} integers", what, kMaxDims));
    std::vector<int64_t> out;
    for (const auto& item : tuple->items) {
      if (item->kind != Value::Kind::Int || item->integer < 0)
        refuse(path_, fmt::format("data.pkl: a tensor's {} holds a value that is not a size", what));
      out.push_back(item->integer);
    }
    return out;
  }
  ValuePtr reduce(const ValuePtr& callable, const ValuePtr& args) {
    if (callable->kind != Value::Kind::Callable || args->kind != Value::Kind::Tuple) bad("REDUCE");
    const auto& a = args->items;
    switch (callable->callable) {
      case Callable::OrderedDict:
        if (!a.empty()) bad("OrderedDict");
        return make(Value::Kind::Dict);
      case Callable::RebuildParameter:  // (tensor, requires_grad, backward_hooks)
        if (a.size() != 3 || a[0]->kind != Value::Kind::Tensor) bad("_rebuild_parameter");
        return a[0];
      case Callable::RebuildTensor: {  // (storage, offset, size, stride, requires_grad, hooks[, metadata])
        if (a.size() < 6 || a.size() > 7 || a[0]->kind != Value::Kind::Storage || a[1]->kind != Value::Kind::Int ||
            a[1]->integer < 0)
          bad("_rebuild_tensor_v2");
        auto v = make(Value::Kind::Tensor);
        v->storage = a[0]->storage;
        v->tensor.dtype = a[0]->storage.dtype;
        v->tensor.storage_offset = a[1]->integer;
        v->tensor.shape = sizes(a[2], "size");
        v->tensor.stride = sizes(a[3], "stride");
        if (v->tensor.shape.size() != v->tensor.stride.size()) bad("_rebuild_tensor_v2 (size and stride)");
        return v;
      }
    }
    bad("REDUCE");
  }

  // Every value made, counted: a state dict needs some twenty a tensor, and
  // a file may not make more than kMaxValues (memory stays bounded).
  ValuePtr make(Value::Kind kind) {
    if (made_.size() >= kMaxValues)
      refuse(path_, fmt::format("data.pkl makes more than {} values; a state dict needs far fewer", kMaxValues));
    auto v = std::make_shared<Value>();
    v->kind = kind;
    made_.push_back(v);
    return v;
  }

  std::string path_;
  const std::string& in_;
  std::vector<ValuePtr> made_;
  size_t pos_ = 0;
  std::vector<ValuePtr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, ValuePtr> memo_;
};

// Elements from the storage's start that a tensor reaches (0 when empty);
// nullopt when the sum overflows.
std::optional<uint64_t> reach(const PthTensor& t) {
  uint64_t last = uint64_t(t.storage_offset);
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) return 0;
    const uint64_t step = uint64_t(t.shape[d] - 1), stride = uint64_t(t.stride[d]);
    if (stride != 0 && step > (std::numeric_limits<uint64_t>::max() / 2 - last) / stride) return std::nullopt;
    last += step * stride;
  }
  return last + 1;
}

}  // namespace

const char* pth_dtype_name(PthDtype dtype) {
  switch (dtype) {
    case PthDtype::F32: return "float32";
    case PthDtype::F64: return "float64";
    case PthDtype::F16: return "float16";
    case PthDtype::BF16: return "bfloat16";
    case PthDtype::I64: return "int64";
    case PthDtype::I32: return "int32";
    case PthDtype::I16: return "int16";
    case PthDtype::I8: return "int8";
    case PthDtype::U8: return "uint8";
    case PthDtype::Bool: return "bool";
  }
  return "unknown";
}

uint64_t pth_dtype_size(PthDtype dtype) {
  switch (dtype) {
    case PthDtype::F64:
    case PthDtype::I64: return 8;
    case PthDtype::F32:
    case PthDtype::I32: return 4;
    case PthDtype::F16:
    case PthDtype::BF16:
    case PthDtype::I16: return 2;
    case PthDtype::I8:
    case PthDtype::U8:
    case PthDtype::Bool: return 1;
  }
  return 1;
}

uint64_t PthTensor::extent_bytes() const { return reach(*this).value_or(0) * pth_dtype_size(dtype); }

std::vector<PthTensor> read_pth_index(const std::string& path, uint64_t file_size, const ByteReader& read) {
  const Zip zip(path, file_size, read);
  const std::string pickle_name = zip.pickle_name();
  const std::string archive = pickle_name.substr(0, pickle_name.size() - 9);  // without "/data.pkl"
  if (const auto* order = zip.find(archive + "/byteorder"))
    if (zip.read(*order) != "little") refuse(path, "a big-endian torch.save file; only little-endian ones are read");
  const ZipEntry& pickle_entry = *zip.find(pickle_name);
  if (pickle_entry.size > kMaxPickleBytes)
    refuse(path, fmt::format("data.pkl is {} bytes; a state dict's is far smaller", pickle_entry.size));
  const std::string pickle = zip.read(pickle_entry);
  Unpickler unpickler(path, pickle);  // outlives root: it frees the values
  const ValuePtr root = unpickler.run();
  if (root->kind != Value::Kind::Dict) refuse(path, "not a state dict (the pickle holds no dict of tensors)");

  std::vector<PthTensor> tensors;
  for (size_t i = 0; i + 1 < root->items.size(); i += 2) {
    const auto& key = root->items[i];
    const auto& value = root->items[i + 1];
    if (key->kind != Value::Kind::String) refuse(path, "not a state dict (a key that is not a string)");
    if (value->kind != Value::Kind::Tensor)
      refuse(path, fmt::format("not a state dict of tensors: {} is not a tensor", key->text));
    PthTensor t = value->tensor;
    t.name = key->text;
    const Storage& s = value->storage;
    const ZipEntry* data = zip.find(archive + "/data/" + s.key);
    if (!data) refuse(path, fmt::format("tensor {}: its storage {} is not in the file", t.name, s.key));
    const uint64_t esize = pth_dtype_size(t.dtype);
    if (uint64_t(s.numel) > data->size / esize || uint64_t(s.numel) * esize != data->size)
      refuse(path, fmt::format("tensor {}: storage {} holds {} bytes, not {} {} elements", t.name, s.key, data->size,
                               s.numel, pth_dtype_name(t.dtype)));
    const auto elements = reach(t);
    if (!elements || *elements > uint64_t(s.numel))
      refuse(path, fmt::format("tensor {}: its size and stride reach beyond its storage {}", t.name, s.key));
    // More elements than its storage holds: a broadcast view (stride 0), which
    // no state dict needs and which would be expanded in memory when read.
    uint64_t count = 1;
    for (const int64_t n : t.shape) {
      if (n == 0) {
        count = 0;
        break;
      }
      if (count > uint64_t(s.numel) / uint64_t(n)) {
        count = uint64_t(s.numel) + 1;
        break;
      }
      count *= uint64_t(n);
    }
    if (count > uint64_t(s.numel))
      refuse(path, fmt::format("tensor {}: more elements than its storage {} holds (a broadcast view); refused", t.name,
                               s.key));
    t.data_offset = data->data_offset;
    t.storage_bytes = data->size;
    tensors.push_back(std::move(t));
  }
  return tensors;
}

}  // namespace wt::io

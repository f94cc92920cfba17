// Small RAII layer over the HDF5 C API, shared by the trace format and the results writer.
// Every failing call throws FormatError with the file and object named; HDF5's own error stack printing is
// switched off (h5_silence) so a bad file gives exactly one line.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

namespace rssm::h5 {

// Turns off HDF5's automatic error-stack printing for this process (idempotent).
void silence();

// Owns one HDF5 identifier and closes it with the matching H5?close.
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// Files. create() truncates; object modification times are not tracked so identical content gives identical bytes.
Handle create_file(const std::string& path);
Handle open_file(const std::string& path, bool write = false);  // FormatError "<path>: not an HDF5 file" etc.
bool is_hdf5(const std::string& path);

Handle create_group(hid_t loc, const std::string& name);
Handle open_group(hid_t loc, const std::string& name, const std::string& file_for_errors);
bool exists(hid_t loc, const std::string& path);  // each component checked, so "a/b" is safe when a is missing

// Attributes (scalar or string) on any object.
void set_attr(hid_t obj, const std::string& name, const std::string& value);
void set_attr(hid_t obj, const std::string& name, long long value);
void set_attr(hid_t obj, const std::string& name, double value);
bool has_attr(hid_t obj, const std::string& name);
std::string get_attr_string(hid_t obj, const std::string& name, const std::string& file_for_errors);
long long get_attr_int(hid_t obj, const std::string& name, const std::string& file_for_errors);
double get_attr_double(hid_t obj, const std::string& name, const std::string& file_for_errors);

// Whole datasets. `dims` is the shape; `chunk` (same rank, or empty for contiguous) enables deflate + shuffle.
void write(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const double* data,
           const std::vector<hsize_t>& chunk = {});
void write(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const float* data,
           const std::vector<hsize_t>& chunk = {});
void write(hid_t loc, const std::string& name, const std::vector<hsize_t>& dims, const long long* data,
           const std::vector<hsize_t>& chunk = {});
void write_strings(hid_t loc, const std::string& name, const std::vector<std::string>& values);

// Shape of a dataset (throws when missing).
std::vector<hsize_t> shape(hid_t loc, const std::string& name, const std::string& file_for_errors);
// Reads a whole dataset, converting to double (any numeric stored type).
std::vector<double> read_doubles(hid_t loc, const std::string& name, const std::string& file_for_errors);
std::vector<long long> read_ints(hid_t loc, const std::string& name, const std::string& file_for_errors);
std::vector<std::string> read_strings(hid_t loc, const std::string& name, const std::string& file_for_errors);

// Names of the links (groups, datasets) in a group, and of the attributes of an object, in creation order where the
// file tracks it (ours do), else in name order.
std::vector<std::string> children(hid_t group);
std::vector<std::string> attribute_names(hid_t obj);

// Marks dataset `scale_name` as a dimension scale and attaches it to dimension `dim` of `dataset_name`.
void attach_scale(hid_t loc, const std::string& dataset_name, const std::string& scale_name, unsigned dim);

}  // namespace rssm::h5

// The figures the TeaCache and MagCache authors fitted for Wan2.1's
// released models, with their sources (cache_calibration.hpp's
// published_calibration). They are data, read from the authors' scripts.
#include <filesystem>

#include "wantrain/wan/sample/cache_calibration.hpp"

namespace wt::wan {

namespace {

// MagCache (Zehong-Ma/MagCache, MagCache4Wan2.1/magcache_generate.py): mag_ratios.
// 100 values: conditional and unconditional interleaved, 50 steps.
const std::vector<double> kMagT2V14B = {
    1.0,     1.0,     1.02504, 1.03017, 1.00025, 1.00251, 0.9985,  0.99962, 0.99779, 0.99771, 0.9966,  0.99658, 0.99482,
    0.99476, 0.99467, 0.99451, 0.99664, 0.99656, 0.99434, 0.99431, 0.99533, 0.99545, 0.99468, 0.99465, 0.99438, 0.99434,
    0.99516, 0.99517, 0.99384, 0.9938,  0.99404, 0.99401, 0.99517, 0.99516, 0.99409, 0.99408, 0.99428, 0.99426, 0.99347,
    0.99343, 0.99418, 0.99416, 0.99271, 0.99269, 0.99313, 0.99311, 0.99215, 0.99215, 0.99218, 0.99215, 0.99216, 0.99217,
    0.99163, 0.99161, 0.99138, 0.99135, 0.98982, 0.9898,  0.98996, 0.98995, 0.9887,  0.98866, 0.98772, 0.9877,  0.98767,
    0.98765, 0.98573, 0.9857,  0.98501, 0.98498, 0.9838,  0.98376, 0.98177, 0.98173, 0.98037, 0.98035, 0.97678, 0.97677,
    0.97546, 0.97543, 0.97184, 0.97183, 0.96711, 0.96708, 0.96349, 0.96345, 0.95629, 0.95625, 0.94926, 0.94929, 0.93964,
    0.93961, 0.92511, 0.92504, 0.90693, 0.90678, 0.8796,  0.87945, 0.86111, 0.86189};
// 100 values: conditional and unconditional interleaved, 50 steps.
const std::vector<double> kMagT2V1_3B = {
    1.0,     1.0,     1.0124,  1.02213, 1.00166, 1.0041,  0.99791, 1.00061, 0.99682, 0.99762, 0.99634, 0.99685, 0.99567,
    0.99586, 0.99416, 0.99422, 0.99578, 0.99575, 0.9957,  0.99563, 0.99511, 0.99506, 0.99535, 0.99531, 0.99552, 0.99549,
    0.99541, 0.99539, 0.9954,  0.99536, 0.99489, 0.99485, 0.99518, 0.99514, 0.99484, 0.99478, 0.99481, 0.99479, 0.99415,
    0.99413, 0.99419, 0.99416, 0.99396, 0.99393, 0.99388, 0.99386, 0.99349, 0.99349, 0.99309, 0.99304, 0.9927,  0.9927,
    0.99228, 0.99226, 0.99171, 0.9917,  0.99137, 0.99135, 0.99068, 0.99063, 0.99005, 0.99003, 0.98944, 0.98942, 0.98849,
    0.98849, 0.98758, 0.98757, 0.98644, 0.98643, 0.98504, 0.98503, 0.9836,  0.98359, 0.98202, 0.98201, 0.97977, 0.97978,
    0.97717, 0.97718, 0.9741,  0.97411, 0.97003, 0.97002, 0.96538, 0.96541, 0.9593,  0.95933, 0.95086, 0.95089, 0.94013,
    0.94019, 0.92402, 0.92414, 0.90241, 0.9026,  0.86821, 0.86868, 0.81838, 0.81939};
// 80 values: conditional and unconditional interleaved, 40 steps.
const std::vector<double> kMagI2V480P = {
    1.0,     1.0,     0.98783, 0.98993, 0.97559, 0.97593, 0.98311, 0.98319, 0.98202, 0.98225, 0.9888,  0.98878,
    0.98762, 0.98759, 0.98957, 0.98971, 0.99052, 0.99043, 0.99383, 0.99384, 0.98857, 0.9886,  0.99065, 0.99068,
    0.98845, 0.98847, 0.99057, 0.99057, 0.98957, 0.98961, 0.98601, 0.9861,  0.98823, 0.98823, 0.98756, 0.98759,
    0.98808, 0.98814, 0.98721, 0.98724, 0.98571, 0.98572, 0.98543, 0.98544, 0.98157, 0.98165, 0.98411, 0.98413,
    0.97952, 0.97953, 0.98149, 0.9815,  0.9774,  0.97742, 0.97825, 0.97826, 0.97355, 0.97361, 0.97085, 0.97087,
    0.97056, 0.97055, 0.96588, 0.96587, 0.96113, 0.96124, 0.9567,  0.95681, 0.94961, 0.94969, 0.93973, 0.93988,
    0.93217, 0.93224, 0.91878, 0.91896, 0.90955, 0.90954, 0.92617, 0.92616};
// 80 values: conditional and unconditional interleaved, 40 steps.
const std::vector<double> kMagI2V720P = {
    1.0,     1.0,     0.99428, 0.99498, 0.98588, 0.98621, 0.98273, 0.98281, 0.99018, 0.99023, 0.98911, 0.98917,
    0.98646, 0.98652, 0.99454, 0.99456, 0.9891,  0.98909, 0.99124, 0.99127, 0.99102, 0.99103, 0.99215, 0.99212,
    0.99515, 0.99515, 0.99576, 0.99572, 0.99068, 0.99072, 0.99097, 0.99097, 0.99166, 0.99169, 0.99041, 0.99042,
    0.99201, 0.99198, 0.99101, 0.99101, 0.98599, 0.98603, 0.98845, 0.98844, 0.98848, 0.98851, 0.98862, 0.98857,
    0.98718, 0.98719, 0.98497, 0.98497, 0.98264, 0.98263, 0.98389, 0.98393, 0.97938, 0.9794,  0.97535, 0.97536,
    0.97498, 0.97499, 0.973,   0.97301, 0.96827, 0.96828, 0.96261, 0.96263, 0.95335, 0.9534,  0.94649, 0.94655,
    0.93397, 0.93414, 0.91636, 0.9165,  0.89088, 0.89109, 0.8679,  0.86768};

// TeaCache (ali-vilab/TeaCache, TeaCache4Wan2.1/teacache_generate.py): the
// use_ret_steps coefficients (on e0), highest power first.
const std::vector<double> kTeaT2V1_3B = {-5.21862437e+04, 9.23041404e+03, -5.28275948e+02, 1.36987616e+01,
                                         -4.99875664e-02};
const std::vector<double> kTeaT2V14B = {-3.03318725e+05, 4.90537029e+04, -2.65530556e+03, 5.87365115e+01,
                                        -3.15583525e-01};
const std::vector<double> kTeaI2V480P = {2.57151496e+05, -3.54229917e+04, 1.40286849e+03, -1.35890334e+01,
                                         1.32517977e-01};
const std::vector<double> kTeaI2V720P = {8.10705460e+03, 2.13393892e+03, -3.72934672e+02, 1.66203073e+01,
                                         -4.17769401e-02};

CacheCalibration published(const std::string& release, const std::vector<double>& tea,
                           const std::vector<double>& interleaved) {
  CacheCalibration c;
  c.source = "the published figures for " + release +
             " (TeaCache: ali-vilab/TeaCache TeaCache4Wan2.1; MagCache: Zehong-Ma/MagCache MagCache4Wan2.1)";
  c.teacache = tea;
  for (size_t i = 0; i < interleaved.size(); ++i) c.magcache[i % 2].push_back(interleaved[i]);
  return c;
}

}  // namespace

std::optional<CacheCalibration> published_calibration(const WanConfig& config, const std::string& weights) {
  const bool t2v = config.model_type == ModelType::T2V && config.in_dim == 16 && config.out_dim == 16;
  if (t2v && config.dim == 1536 && config.num_layers == 30)
    return published("Wan2.1-T2V-1.3B", kTeaT2V1_3B, kMagT2V1_3B);
  if (t2v && config.dim == 5120 && config.num_layers == 40) return published("Wan2.1-T2V-14B", kTeaT2V14B, kMagT2V14B);
  if (config.model_type == ModelType::I2V && config.dim == 5120 && config.num_layers == 40 && config.in_dim == 36) {
    // The authors' scripts tell the two apart by the folder's name.
    const std::string name = std::filesystem::path(weights).lexically_normal().string();
    if (name.find("720P") != std::string::npos) return published("Wan2.1-I2V-14B-720P", kTeaI2V720P, kMagI2V720P);
    return published("Wan2.1-I2V-14B-480P", kTeaI2V480P, kMagI2V480P);
  }
  return std::nullopt;
}

}  // namespace wt::wan

#include "wantrain/train/sample_videos.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace wt::train {

std::vector<SampleVideo> gather_sample_videos(const distributed::World& world, const std::vector<SampleVideo>& mine,
                                              std::chrono::milliseconds bound) {
  auto packed = nlohmann::json::array();
  for (const auto& v : mine)
    packed.push_back({{"index", v.index},
                      {"prompt", v.prompt},
                      {"path", v.path},
                      {"seconds", v.seconds},
                      {"rank", v.rank},
                      {"width", v.strip.width},
                      {"height", v.strip.height},
                      {"colorspace", v.strip.colorspace},
                      {"png", nlohmann::json::binary(std::vector<uint8_t>(v.strip.png.begin(), v.strip.png.end()))}});
  const auto bytes = nlohmann::json::to_cbor(packed);
  std::vector<SampleVideo> all;
  for (const auto& rank_bytes :
       world.all_gather(std::string(bytes.begin(), bytes.end()), "gathering the prompts' sample videos", bound))
    for (const auto& v : nlohmann::json::from_cbor(rank_bytes)) {
      SampleVideo video;
      video.index = v.at("index").get<int64_t>();
      video.prompt = v.at("prompt").get<std::string>();
      video.path = v.at("path").get<std::string>();
      video.seconds = v.at("seconds").get<double>();
      video.rank = v.at("rank").get<int>();
      video.strip.width = v.at("width").get<int>();
      video.strip.height = v.at("height").get<int>();
      video.strip.colorspace = v.at("colorspace").get<int>();
      const auto& png = v.at("png").get_binary();
      video.strip.png.assign(png.begin(), png.end());
      all.push_back(std::move(video));
    }
  std::sort(all.begin(), all.end(), [](const SampleVideo& a, const SampleVideo& b) { return a.index < b.index; });
  return all;
}

}  // namespace wt::train

// The sample outputs (wan/sample/sample_outputs): the latent preview as a
// file and as TensorBoard's image is latent_preview's picture of the sample
// above its reference, and a file it cannot write is an error naming it.
// (DecodedVideo needs a VAE: the prompt videos' and wansample's --video
// tests cover it.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "wantrain/util/error.hpp"
#include "wantrain/wan/sample/sample_outputs.hpp"

namespace wt::wan {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(SampleOutputs, APreviewIsTheSampleAboveItsReferenceInTheFileAndForTensorBoard) {
  torch::manual_seed(1);
  const auto latents = torch::randn({4, 2, 4, 4}), reference = torch::randn({4, 2, 4, 4});
  const auto want = latent_preview({latents, reference});
  const auto path = (std::filesystem::path(::testing::TempDir()) / "sample-outputs-preview.png").string();
  PreviewPng preview(path);
  preview.write({latents, reference});
  EXPECT_EQ(read_bytes(path), want.png());
  EXPECT_EQ(preview.preview().channels, want.channels);
  const auto image = preview.image();
  EXPECT_EQ(image.width, want.width);
  EXPECT_EQ(image.height, want.height);
  EXPECT_EQ(image.png, want.png());
  // Without a reference (and without a file): the sample alone.
  PreviewPng alone;
  alone.write({latents, {}});
  EXPECT_EQ(alone.image().png, latent_preview({latents}).png());
  EXPECT_LT(alone.image().height, image.height);
}

TEST(SampleOutputs, APreviewThatCannotBeWrittenNamesItsFile) {
  const std::string path = "/proc/wantrain-no-such-dir/preview.png";
  PreviewPng preview(path);
  try {
    preview.write({torch::zeros({4, 1, 2, 2}), {}});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace wt::wan

// H5_CHECK turns a failed HDF5 call into wt::Error with HDF5's own reason.
#include <gtest/gtest.h>
#include <hdf5.h>

#include "wantrain/io/h5_check.hpp"

TEST(H5Check, FailedCallThrowsErrorNamingCallLocationAndReason) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // no HDF5 stack dump on stderr
  try {
    H5_CHECK(H5Fopen("/nonexistent/dir/shard.h5", H5F_ACC_RDONLY, H5P_DEFAULT));
    FAIL() << "H5_CHECK did not throw";
  } catch (const wt::Error& e) {
    const std::string message = e.what();
    // The function's name, never the C++ expression of its call.
    EXPECT_NE(message.find("HDF5 H5Fopen failed: "), std::string::npos) << message;
    EXPECT_EQ(message.find("H5F_ACC_RDONLY"), std::string::npos) << message;
    EXPECT_NE(message.find("h5_check_test.cpp:"), std::string::npos) << message;
    EXPECT_EQ(message.find("no detail on HDF5's error stack"), std::string::npos) << message;
  }
}

TEST(H5Check, PassesTheResultOfASuccessfulCallThrough) {
  const hid_t space = H5_CHECK(H5Screate(H5S_SCALAR));
  EXPECT_GE(space, 0);
  EXPECT_GE(H5_CHECK(H5Sclose(space)), 0);
}

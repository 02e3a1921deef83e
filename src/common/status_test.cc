#include "frugal/common/status.h"

#include <gtest/gtest.h>

namespace frugal {
namespace {

Result<int> Half(int x) {
  if (x % 2 != 0) return Status::InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  FRUGAL_ASSIGN_OR_RETURN(int h, Half(x));
  FRUGAL_ASSIGN_OR_RETURN(int q, Half(h));
  *out = q;
  return Status::Ok();
}

TEST(StatusTest, OkAndErrorsFormat) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().ToString(), "OK");
  Status s = Status::Corruption("header truncated").WithContext("train-images");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
  EXPECT_EQ(s.ToString(), "Corruption: train-images: header truncated");
}

TEST(StatusTest, AssignOrReturnPropagates) {
  int out = 0;
  EXPECT_TRUE(Quarter(12, &out).ok());
  EXPECT_EQ(out, 3);
  Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
}

TEST(StatusTest, ResultFromOkStatusIsAnInternalError) {
  Result<int> r = Status::Ok();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Status::Code::kInternal);
  EXPECT_EQ(r.status().message(), "Result constructed from an Ok status without a value");
  Result<int> v = 7;
  EXPECT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
}

}  // namespace
}  // namespace frugal

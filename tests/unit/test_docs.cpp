// The manual stays true to the tables in the code: accrun(7) lists every
// accelerator type detection knows, with every alias it accepts.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "accrun/detect.hpp"

namespace accrun {
namespace {

// The page's text with roff escapes for '-' undone.
std::string read_page(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size() && text[i + 1] == '-') continue;
    out += text[i];
  }
  return out;
}

TEST(Docs, Accrun7ListsEveryAcceleratorTypeAndAlias) {
  const std::string page = read_page(std::string(ACCRUN_SOURCE_DIR) + "/man/man7/accrun.7");
  ASSERT_FALSE(page.empty());
  const auto& table = detect::accelerator_types();
  ASSERT_GT(table.size(), 20u);
  for (const auto& t : table) {
    EXPECT_NE(page.find("\\fB" + t.name + "\\fR"), std::string::npos)
        << "accrun(7) does not list the type " << t.name;
    for (const auto& alias : t.aliases) {
      EXPECT_NE(page.find(alias), std::string::npos)
          << "accrun(7) does not list the alias " << alias << " of " << t.name;
    }
  }
}

TEST(Docs, HostfilePageListsEveryInstanceType) {
  const std::string page = read_page(std::string(ACCRUN_SOURCE_DIR) + "/man/man5/accrun-hostfile.5");
  ASSERT_FALSE(page.empty());
  ASSERT_GT(detect::instance_types().size(), 40u);
  for (const auto& t : detect::instance_types()) {
    EXPECT_NE(page.find("\\fB" + t.name + "\\fR " + std::to_string(t.chips)), std::string::npos)
        << "accrun-hostfile(5) does not list the instance type " << t.name << " with its " << t.chips;
  }
}

}  // namespace
}  // namespace accrun

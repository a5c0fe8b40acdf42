// The manual stays true to the code: accrun(7) lists every accelerator type
// detection knows, with every alias it accepts; every function accrun.h
// declares opens a man page (`man accrun_get`); docs/design.md keeps the
// section numbers code comments cite.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

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

// ---- One man page per public function ----

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every function accrun.h declares: the names followed by '(' once comments
// are gone (the header declares no function-like macro or function pointer).
std::set<std::string> public_functions(const std::string& header) {
  std::string code;
  for (size_t i = 0; i < header.size(); ++i) {
    if (header.compare(i, 2, "/*") == 0) {
      const size_t end = header.find("*/", i + 2);
      i = end == std::string::npos ? header.size() : end + 1;
    } else if (header.compare(i, 2, "//") == 0) {
      const size_t end = header.find('\n', i);
      i = end == std::string::npos ? header.size() : end - 1;
    } else {
      code += header[i];
    }
  }
  std::set<std::string> names;
  static const std::regex decl(R"(\b(accrun_[a-z0-9_]+)\s*\()");
  for (std::sregex_iterator it(code.begin(), code.end(), decl), end; it != end; ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

// The target of a page that is only a `.so man3/other.3` link, or "".
std::string so_target(const std::string& page) {
  std::istringstream in(page);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(".\\\"", 0) == 0 || line.empty()) continue;  // roff comment
    if (line.rfind(".so ", 0) == 0) return line.substr(4);
    return "";
  }
  return "";
}

// The names a page's NAME section gives, as `man -k` and `whatis` read them.
std::set<std::string> names_section(const std::string& page) {
  const size_t start = page.find(".SH NAME\n");
  if (start == std::string::npos) return {};
  const size_t body = start + 9;
  const size_t end = page.find("\\-", body);
  std::set<std::string> names;
  static const std::regex word(R"([A-Za-z0-9_.-]+)");
  const std::string list = page.substr(body, end == std::string::npos ? 0 : end - body);
  for (std::sregex_iterator it(list.begin(), list.end(), word), e; it != e; ++it) {
    names.insert(it->str());
  }
  return names;
}

const std::filesystem::path kMan = std::filesystem::path(ACCRUN_SOURCE_DIR) / "man";

TEST(Docs, HeaderParserFindsTheWholeApi) {
  const auto fns = public_functions(read_file(std::filesystem::path(ACCRUN_SOURCE_DIR) /
                                              "runtime/include/accrun/accrun.h"));
  // A parser that found nothing would let the page check below pass vacuously.
  EXPECT_GE(fns.size(), 30u);
  for (const char* fn : {"accrun_init", "accrun_get", "accrun_allgather", "accrun_last_error",
                         "accrun_group_end", "accrun_init_mpi"}) {
    EXPECT_TRUE(fns.count(fn)) << fn;
  }
  // Names inside comments are not declarations.
  EXPECT_EQ(public_functions("/* accrun_nothing() */ int accrun_x(void); // accrun_y(\n"),
            std::set<std::string>{"accrun_x"});
}

TEST(Docs, EveryPublicFunctionOpensAManPage) {
  const auto fns = public_functions(read_file(std::filesystem::path(ACCRUN_SOURCE_DIR) /
                                              "runtime/include/accrun/accrun.h"));
  std::vector<std::string> missing;
  for (const auto& fn : fns) {
    const auto path = kMan / "man3" / (fn + ".3");
    if (!std::filesystem::exists(path)) {
      missing.push_back(fn + " (no man/man3/" + fn + ".3)");
      continue;
    }
    std::string page = read_file(path);
    const std::string target = so_target(page);
    if (!target.empty()) {
      if (!std::filesystem::exists(kMan / target)) {
        missing.push_back(fn + " (its link names " + target + ", which does not exist)");
        continue;
      }
      page = read_file(kMan / target);
    }
    if (!names_section(page).count(fn)) {
      missing.push_back(fn + " (the page " + (target.empty() ? fn + ".3" : target) +
                        " does not name it under NAME)");
    }
  }
  EXPECT_TRUE(missing.empty()) << "public functions of accrun.h without a man page:\n  "
                               << [&] {
                                    std::string s;
                                    for (const auto& m : missing) s += m + "\n  ";
                                    return s;
                                  }();
}

TEST(Docs, EveryManPageLinkResolvesToARealPage) {
  size_t links = 0;
  for (const auto& section : std::filesystem::directory_iterator(kMan)) {
    if (!section.is_directory()) continue;
    for (const auto& entry : std::filesystem::directory_iterator(section.path())) {
      const std::string target = so_target(read_file(entry.path()));
      if (target.empty()) continue;
      ++links;
      const auto resolved = kMan / target;
      ASSERT_TRUE(std::filesystem::is_regular_file(resolved))
          << entry.path() << " links to " << target << ", which does not exist";
      // man-db follows one level of .so; a link to a link renders nothing.
      EXPECT_TRUE(so_target(read_file(resolved)).empty())
          << entry.path() << " links to " << target << ", itself a link";
      // Installed pages resolve .so against the manual's root: manN/NAME.N.
      static const std::regex form(R"(man([1-9])/[A-Za-z0-9_.-]+\.\1)");
      EXPECT_TRUE(std::regex_match(target, form))
          << entry.path() << ": " << target << " is not of the form manN/NAME.N";
    }
  }
  EXPECT_GT(links, 0u);
}

// Code comments cite "docs/design.md §N"; the sections keep their numbers.
TEST(Docs, DesignDocumentKeepsItsNumberedSections) {
  const std::string doc =
      read_file(std::filesystem::path(ACCRUN_SOURCE_DIR) / "docs" / "design.md");
  ASSERT_FALSE(doc.empty()) << "docs/design.md is missing";
  for (int n = 1; n <= 9; ++n) {
    EXPECT_NE(doc.find("\n## " + std::to_string(n) + ". "), std::string::npos)
        << "docs/design.md has no section " << n;
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

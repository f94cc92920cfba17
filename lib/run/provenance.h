// Provenance shared by every file we write: version, git commit, UTC time, host, device.
#pragma once

#include "io/results.h"

namespace rssm {

AttrMap provenance_attrs();

}  // namespace rssm

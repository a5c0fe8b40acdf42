// accrun/accrun.hpp — a thin C++ layer over <accrun/accrun.h>.
#pragma once

#include "accrun/accrun.h"

// The parts a decode step is timed in, for the A/B report's files (measure/ab_data.h, ab_stats.h, ab_render.h): the
// list lives below, in engine/decode_profile.h, because the CUDA engine's profile() returns it; measure/ includes
// engine/, never the reverse.
#pragma once
#include "engine/decode_profile.h"  // ProfileParts, PartMs, DecodeProfile

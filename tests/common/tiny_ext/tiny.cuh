// A header of the tiny test extension: changing it must change the cache key.
#pragma once
#define TINY_VALUE 41

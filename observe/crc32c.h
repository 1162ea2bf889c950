#ifndef TRELLIS_OBSERVE_CRC32C_H_
#define TRELLIS_OBSERVE_CRC32C_H_

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
// TFRecord framing (event_file.h), and the mask TFRecord puts on it.

#include <cstdint>
#include <string_view>

namespace trellis::observe {

uint32_t Crc32c(std::string_view data);

// TFRecord's masked CRC: rotated right by 15 bits plus 0xa282ead8, so that
// a CRC of data holding CRCs is not itself a plain CRC.
uint32_t MaskCrc32c(uint32_t crc);

}  // namespace trellis::observe

#endif  // TRELLIS_OBSERVE_CRC32C_H_

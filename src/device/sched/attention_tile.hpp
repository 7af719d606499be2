#pragma once
// A tile of the attention forward: BLOCK_M query rows of one (batch, head).
namespace xstage::sched {

struct TileCoord {
  int b, h, m_block;
};

}  // namespace xstage::sched

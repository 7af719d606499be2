#pragma once
// What a kernel asks of an epilogue policy beyond the shared contract.
#include <type_traits>

namespace xstage::attention {

// Whether a policy has a warp of the wgmma kernel's producer warpgroup send
// the staged rows (kProducerSends: epilogue_ulysses_producer_paced.cuh).
// Only the wgmma kernel has such a warp; the mma kernel refuses the policy.
template <class E, class = void>
struct ProducerSends : std::false_type {};
template <class E>
struct ProducerSends<E, std::void_t<decltype(E::kProducerSends)>> : std::bool_constant<E::kProducerSends> {};

}  // namespace xstage::attention

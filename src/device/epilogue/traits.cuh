#pragma once
// What a kernel asks of an epilogue policy beyond the shared contract
// (remote/epilogue_store.cuh).
#include <type_traits>

namespace xstage::epilogue {

// Whether a policy has a warp of a warp-specialised kernel's producer
// warpgroup send the staged rows (kProducerSends:
// remote/epilogue_producer_paced.cuh). A kernel without such a warp refuses
// the policy.
template <class E, class = void>
struct ProducerSends : std::false_type {};
template <class E>
struct ProducerSends<E, std::void_t<decltype(E::kProducerSends)>> : std::bool_constant<E::kProducerSends> {};

}  // namespace xstage::epilogue

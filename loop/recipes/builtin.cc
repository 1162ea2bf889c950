#include "loop/recipes/builtin.h"

namespace trellis::loop {

absl::Status RegisterBuiltinRecipes(RecipeRegistry& registry) {
#define TRELLIS_LOOP_REGISTER_RECIPE(Name) \
  if (absl::Status s = Register##Name(registry); !s.ok()) return s;
  TRELLIS_LOOP_BUILTIN_RECIPES(TRELLIS_LOOP_REGISTER_RECIPE)
#undef TRELLIS_LOOP_REGISTER_RECIPE
  return absl::OkStatus();
}

}  // namespace trellis::loop

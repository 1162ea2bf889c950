#ifndef TRELLIS_WEB_PAGE_H_
#define TRELLIS_WEB_PAGE_H_

// The dashboard page (web/dashboard.{html,css,js}, inlined into one HTML
// text at build time by web/embed_assets.cmake). One page draws both the
// live dashboard and `trellis report`: live, it fetches the run's view
// (ledger::RunView::ViewJson) from api/view; in a report, the view is
// inlined.

#include <string>
#include <string_view>

namespace trellis::web {

// The page with "/*TRELLIS_DATA*/" where the inlined view goes.
extern const char kDashboardTemplate[];

// The live page (`data_json` empty: it polls api/view), or a static page
// showing `data_json` (a JSON object; '<' is escaped so that no text in it
// can close the script element).
std::string DashboardPage(std::string_view data_json);

}  // namespace trellis::web

#endif  // TRELLIS_WEB_PAGE_H_

from django.urls import path

from forklab.web.views import compare, forks, home, live, removal, runs, shares, steps, sweeps

urlpatterns = [
    path("", home.home, name="home"),
    path("healthz", home.healthz, name="healthz"),
    path("projects/switch/", home.switch_project, name="switch-project"),
    path("runs/<str:run_id>/", runs.run_page, name="run"),
    path("runs/<str:run_id>/steps/<str:node>/<int:occurrence>/", steps.step, name="step"),
    path("runs/<str:run_id>/delete/", removal.delete_run, name="run-delete"),
    path("runs/<str:run_id>/fork/", forks.compose, name="compose"),
    path("runs/<str:run_id>/fork/preflight/", forks.preflight, name="preflight"),
    path("runs/<str:run_id>/sweep/", sweeps.launch, name="sweep-launch"),
    path("runs/<str:run_id>/sweep/estimate/", sweeps.estimate, name="sweep-estimate"),
    path("forks/<str:run_id>/", live.live, name="live"),
    path("forks/<str:run_id>/cancel/", live.cancel, name="cancel"),
    path("forks/<str:run_id>/answer/", live.answer, name="answer"),
    path("compare/", home.compare_pick, name="compare-pick"),
    path("compare/<str:base_id>/<str:variant_id>/", compare.compare, name="compare"),
    path("compare/<str:base_id>/<str:variant_id>/steps/<int:index>/", steps.compare_step,
         name="compare-step"),
    path("sweeps/<str:group_id>/", sweeps.sweep, name="sweep"),
    path("shares/", shares.shares, name="shares"),
    path("shares/<str:token>/revoke/", shares.revoke, name="revoke-share"),
    path("s/<str:token>/", shares.shared, name="shared"),
    path("s/<str:token>/compare/<str:base_id>/<str:variant_id>/", shares.shared_compare,
         name="shared-compare"),
    path("s/<str:token>/runs/<str:run_id>/steps/<str:node>/<int:occurrence>/",
         steps.shared_step, name="shared-step"),
    path("s/<str:token>/compare/<str:base_id>/<str:variant_id>/steps/<int:index>/",
         steps.shared_compare_step, name="shared-compare-step"),
]

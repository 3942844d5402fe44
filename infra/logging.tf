# State hints: a log sink publishing Vertex AI job log entries and audit entries to the
# events topic. A hint only says which job to read again (shared/domain/decisions/hints.py).

locals {
  # Vertex AI's own messages about a job ("Job is preparing.", "Job completed successfully.")
  # are ml_job entries with task_name "service"; the training containers' output is ml_job too
  # (task_name workerpool0-0, ...), and can be thousands of lines a minute, none of them a
  # state change. Only the service's entries are hints.
  ml_job_filter = "resource.type=\"ml_job\" AND resource.labels.task_name=\"service\""

  # Admin Activity audit entries (always written, free) of calls that change a job's state,
  # whoever made them: a cancel from the console is a hint too. The parser reads
  # protoPayload.resourceName when it names a custom job, tuning job or training pipeline,
  # and ignores any other entry. ":" matches the v1 and v1beta1 method names alike.
  audit_methods = [
    "JobService.CreateCustomJob",
    "JobService.CancelCustomJob",
    "JobService.DeleteCustomJob",
    "JobService.CreateHyperparameterTuningJob",
    "JobService.CancelHyperparameterTuningJob",
    "JobService.DeleteHyperparameterTuningJob",
    "PipelineService.CreateTrainingPipeline",
    "PipelineService.CancelTrainingPipeline",
    "PipelineService.DeleteTrainingPipeline",
  ]
  audit_filter = format(
    "protoPayload.serviceName=\"aiplatform.googleapis.com\" AND (%s)",
    join(" OR ", [for m in local.audit_methods : "protoPayload.methodName:\"${m}\""]),
  )

  hint_log_filter = "(${local.ml_job_filter}) OR (${local.audit_filter})"
}

resource "google_logging_project_sink" "hints" {
  name        = "flexjobs-job-hints"
  description = "Vertex AI job state messages and job audit entries, as hints for flexjobs."
  destination = "pubsub.googleapis.com/${google_pubsub_topic.events.id}"
  filter      = local.hint_log_filter

  # The sink writes as its own service agent, which may publish to the events topic only.
  unique_writer_identity = true
}

resource "google_pubsub_topic_iam_member" "sink_writer" {
  topic  = google_pubsub_topic.events.id
  role   = "roles/pubsub.publisher"
  member = google_logging_project_sink.hints.writer_identity
}

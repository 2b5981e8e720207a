# One image for web, worker and beat (see docker-compose.yml).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app

COPY requirements/ requirements/
RUN pip install --no-cache-dir -r requirements/base.txt -c requirements/constraints.txt \
    && pip install --no-cache-dir "gunicorn==23.0.0"

COPY . .
RUN DJANGO_SECRET_KEY=collectstatic python manage.py collectstatic --noinput -v 0
RUN useradd --create-home --uid 1000 app && mkdir -p /app/var && chown -R app /app/var
USER app

EXPOSE 8000
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3"]

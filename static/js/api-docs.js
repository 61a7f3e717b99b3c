/* The API docs page (/api/v1/docs): Swagger UI from ninja's files, its settings read from the
   page's JSON block (our Content-Security-Policy allows no inline script). */
(function () {
  "use strict";
  const body = document.body.dataset;
  const config = JSON.parse(document.getElementById("swagger-settings").textContent);

  // Swagger UI asks swagger-client to resolve components.securitySchemes each time the document
  // loads; for an OpenAPI 3.1 document swagger-client first rebuilds the whole document as ApiDOM
  // to do it, which was most of the page's main-thread time before the operations showed.
  // Schemes holding no $ref are stored as they are at once, so the operations show first; the
  // asked resolution still runs once the page is idle, and leaves swagger-client's rebuilt
  // document ready for the first operation opened.
  const path = ["components", "securitySchemes"];
  const holdsRef = (value) => JSON.stringify(value).includes('"$ref"');
  const plainSecuritySchemes = () => ({
    statePlugins: {
      spec: {
        wrapActions: {
          requestResolvedSubtree: (original, system) => (asked) => {
            if (asked.length === path.length && asked.every((key, i) => key === path[i])) {
              const schemes = system.specSelectors.specJson().getIn(path);
              const plain = schemes && schemes.toJS ? schemes.toJS() : null;
              if (plain && !holdsRef(plain)) {
                const later = window.requestIdleCallback || ((run) => window.setTimeout(run, 200));
                later(() => original(asked), { timeout: 3000 });
                return system.specActions.updateResolvedSubtree(path, plain);
              }
            }
            return original(asked);
          },
        },
      },
    },
  });

  config.dom_id = "#swagger-ui";
  config.presets = [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset];
  config.plugins = [plainSecuritySchemes];
  if (body.apiCsrf && body.csrfToken) {
    config.requestInterceptor = (request) => {
      request.headers["X-CSRFToken"] = body.csrfToken;
      return request;
    };
  }
  window.ui = SwaggerUIBundle(config);
})();
